//! Plain helpers every layer may use, which use nothing of the crate: every call into the C
//! library behind a safe function ([`sys`]), the time the timers read ([`clock`]), SHA-256
//! ([`digest`]), calls made several at a time ([`parallel`]), and the unit tests' helpers.

pub mod clock;
pub(crate) mod digest;
pub(crate) mod parallel;
pub(crate) mod sys;
#[cfg(test)]
pub(crate) mod testing;
