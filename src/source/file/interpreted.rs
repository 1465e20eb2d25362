//! What a version of a file holds once interpreted: its tensors as a file of its format (read on
//! first use, the data files it names opened below SOURCE only), or for an index its plan; and
//! what follows from them (its conversion, the digest of its names).

use super::*;

impl Source {
    /// Its tensors as a file of `format` (read on first call), or why it has none.
    pub fn describe(&self, format: Format) -> &Described {
        self.describe_in(format, None)
    }

    /// Whether a description of it failed on another file it names (see
    /// [`crate::format::FormatError::in_other_file`]), which may have changed since while this
    /// version did not: the registry then opens it again, and the new source reads it again.
    pub fn read_again(&self) -> bool {
        self.interpreted.described.iter().any(|d| {
            matches!(d.get(), Some(Err(e)) if matches!(&**e, DescribeError::Invalid(f) if f.in_other_file()))
        })
    }

    /// [`Source::describe`], the data files its reader opens (if it is read now) looked for in
    /// `dir`, the directory it is claimed in (which a file reached through links has several of),
    /// else where it was found.
    pub fn describe_in(&self, format: Format, dir: Option<&Path>) -> &Described {
        self.interpreted.described[format.position()].get_or_init(|| self.read_as(format, dir))
    }

    /// Its tensors read as a file of `format`, its data files looked for in `dir` (see
    /// [`Source::describe_in`]).
    fn read_as(&self, format: Format, dir: Option<&Path>) -> Described {
        let unreadable = |e| DescribeError::Unreadable(self.path.clone(), e);
        let file = self.file_for_read().map_err(unreadable)?;
        let open = |name: &str| self.open_beside(dir, name);
        let mut input = Input::new(&file, &self.path, &open);
        if let Some(setting) = self.sources.settings().of(format) {
            input = input.with_setting(setting);
        }
        let description = format.read(input).map_err(DescribeError::Invalid)?;
        Ok(Arc::new(description))
    }

    /// Its valid descriptions read so far, by format.
    fn valid(&self) -> impl Iterator<Item = (Format, &Arc<Description>)> {
        Format::ALL
            .into_iter()
            .zip(&self.interpreted.described)
            .filter_map(|(f, d)| Some((f, d.get()?.as_ref().ok()?)))
    }

    /// Opens the file `name` beside this one (in `dir`, else where it was found) for its reader:
    /// only below SOURCE, links followed only while they stay there (`EXDEV` for one that
    /// leaves it); nothing where SOURCE is a single file.
    fn open_beside(&self, dir: Option<&Path>, name: &str) -> std::io::Result<File> {
        let outside = || std::io::Error::from_raw_os_error(libc::EXDEV);
        let root = self.sources.root().ok_or_else(outside)?;
        let dir = dir.or(self.entry.parent()).ok_or_else(outside)?;
        let path = dir.join(name);
        let rel = path.strip_prefix(&root).map_err(|_| outside())?;
        match sys::open_beneath(&root, rel) {
            // A kernel before 5.6: the file itself, no link followed.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&path),
            opened => opened,
        }
    }

    /// The safetensors file this valid file of `format` converts to, or why it is not offered as
    /// one; `None` for a safetensors file, or one that is not valid.
    pub fn converted(&self, format: Format) -> Option<&Offered> {
        self.interpreted
            .converted
            .get_or_init(|| {
                let wanted = self.describe(format).as_ref().ok()?.conversion.as_ref()?;
                Some(match wanted {
                    Ok(conversion) => Converted::of(conversion)
                        .map(Arc::new)
                        .map_err(|e| Arc::from(format!("not offered as safetensors: {e}"))),
                    Err(why) => Err(Arc::from(why.to_string())),
                })
            })
            .as_ref()
    }

    /// The file parsed as an index, or why it is broken. Parsed anew on each call: an index of a
    /// large set is megabytes of memory; what is kept of it is its [`Plan`].
    pub fn index(&self) -> Result<Index, PlanError> {
        let file = self.file_for_read().map_err(PlanError::Unreadable)?;
        index::read(&file, self.version.size).map_err(PlanError::Invalid)
    }

    /// What this index says, in brief (parsed on first call), or why it is broken.
    pub fn plan(&self) -> &Result<Arc<Plan>, Arc<PlanError>> {
        self.interpreted.plan.get_or_init(|| {
            self.index()
                .map(|idx| Arc::new(Plan::of(idx)))
                .map_err(Arc::new)
        })
    }

    /// Whether it has been interpreted as `what`.
    pub fn is_parsed(&self, what: Parse) -> bool {
        match what {
            Parse::Tensors(format) => self.interpreted.described[format.position()]
                .get()
                .is_some(),
            Parse::Index => self.interpreted.plan.get().is_some(),
        }
    }

    /// Interprets it as `what` now, for later use (claimed in the directory `dir`), and counts the
    /// call to the source.
    pub fn parse(&self, what: Parse, dir: &Path) {
        match what {
            Parse::Tensors(format) => {
                let _ = self.describe_in(format, Some(dir));
            }
            Parse::Index => {
                let _ = self.plan();
            }
        }
        self.sources.step();
    }

    /// The count and digest of the tensor names of this file of `format` (none if it is not
    /// valid).
    pub fn digest(&self, format: Format) -> (usize, u64) {
        *self
            .interpreted
            .digest
            .get_or_init(|| match self.describe(format) {
                Ok(d) => index::digest(d.tensors.iter().map(|t| &*t.name)),
                Err(_) => (0, 0),
            })
    }

    /// Where the data its tensors' offsets are relative to starts (0 before it is described, or
    /// if it is not valid).
    pub fn data_start(&self) -> u64 {
        self.valid().next().map_or(0, |(_, d)| d.data_start)
    }

    /// The format it was described in, if it has valid tensors.
    pub fn format(&self) -> Option<Format> {
        self.valid().next().map(|(f, _)| f)
    }

    /// What its reader found it to be (`safetensors`, `pytorch-zip`, ...), if it has valid
    /// tensors.
    pub fn kind(&self) -> Option<&'static str> {
        self.valid().next().map(|(_, d)| d.kind)
    }
}
