//! [`Tuning`]: how the daemon talks to the kernel (threads, caching, READDIRPLUS, passthrough).

/// How the daemon talks to the kernel. [`Tuning::default`] is what it uses; [`Tuning::baseline`]
/// (environment `TENSORMOUNT_TUNING=baseline`) is fuser's defaults with one thread, so that the
/// benchmark can show what each setting brings.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// FUSE worker threads (all reading requests from the session's one /dev/fuse descriptor).
    pub threads: usize,
    /// Keep the kernel's page cache of a file and of directory listings across opens.
    pub keep_cache: bool,
    /// Answer directory listings with attributes (READDIRPLUS).
    pub readdirplus: bool,
    /// Let the kernel read mirrored whole files straight from their source (FUSE passthrough,
    /// Linux 6.9+, needs CAP_SYS_ADMIN); tensors cannot use it, as it maps offsets 1:1.
    pub passthrough: bool,
    /// Serve every file of a local source that is not passed through with direct I/O
    /// (`FOPEN_DIRECT_IO`): reads skip the mount's page cache, so the source's is the only one,
    /// where the kernel also lets such files be mapped (`FUSE_DIRECT_IO_ALLOW_MMAP`, Linux 6.6+).
    /// Off with `-o kernel_cache`: the mount's page cache, kept across opens.
    pub direct_io: bool,
    /// The readahead of the mount's files, in KiB, where the kernel's default is lower: what a
    /// page fault of a client's mapping reads around it, in requests of up to 1 MiB, several in
    /// flight.
    pub readahead_kb: Option<u32>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            threads: 2,
            keep_cache: true,
            readdirplus: true,
            passthrough: true,
            direct_io: true,
            readahead_kb: Some(4096),
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
            direct_io: false,
            readahead_kb: None,
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
