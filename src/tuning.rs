//! [`Tuning`]: how the daemon talks to the kernel (threads, caching, READDIRPLUS, passthrough).

/// How the daemon talks to the kernel. [`Tuning::default`] is what it uses; [`Tuning::baseline`]
/// (environment `TENSORMOUNT_TUNING=baseline`) is fuser's defaults with one thread, so that the
/// benchmark can show what each setting brings.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// FUSE worker threads (each with its own /dev/fuse descriptor).
    pub threads: usize,
    /// Keep the kernel's page cache of a file and of directory listings across opens.
    pub keep_cache: bool,
    /// Answer directory listings with attributes (READDIRPLUS).
    pub readdirplus: bool,
    /// Let the kernel read mirrored whole files straight from their source (FUSE passthrough,
    /// Linux 6.9+, needs CAP_SYS_ADMIN); tensors cannot use it, as it maps offsets 1:1.
    pub passthrough: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            threads: 2,
            keep_cache: true,
            readdirplus: true,
            passthrough: true,
        }
    }
}

impl Tuning {
    pub fn baseline() -> Tuning {
        Tuning {
            threads: 1,
            keep_cache: false,
            readdirplus: false,
            passthrough: false,
        }
    }

    /// The tuning chosen by the environment.
    pub fn from_env() -> Tuning {
        match std::env::var("TENSORMOUNT_TUNING").as_deref() {
            Ok("baseline") => Tuning::baseline(),
            _ => Tuning::default(),
        }
    }
}
