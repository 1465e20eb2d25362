//! The entry each winning want gets, one function a kind of want: kept from the last tree where made from the same sources, else to build.

use super::*;

impl Step<'_> {
    /// The directory a winning want gets, with the sources it is built from: the old one if built
    /// from the same sources, else one to build; none for a set that is not valid (its index then
    /// carries why). One function a kind of want.
    pub(super) fn slot<'f>(
        &self,
        want: &Want,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
        errors: &mut Errors,
    ) -> Result<Option<Drafted<Slot<'f>>>, BuildError> {
        let (name, source) = &files[want.file];
        let dir: Arc<[u8]> = Arc::from(&want.dir[..]);
        match want.what {
            Wanted::Converted(format) => Ok(self.converted(want, source, dir, format)),
            Wanted::Tensors(format) => Ok(Some(self.tensors(want, source, dir, format))),
            Wanted::Numbered(format) | Wanted::NumberedIndex(format) => {
                Ok(self.numbered(want, format, files))
            }
            _ if self.in_flux(name) => {
                refuse(errors, name, want.what.format(), self.being_written());
                Ok(None)
            }
            Wanted::ConvertedIndex(_) => Ok(self.converted_index(name, source, dir, files)),
            Wanted::Set(_) => self.set(want, name, source, dir, files, errors),
        }
    }

    /// The virtual safetensors file a checkpoint converts to.
    fn converted<'f>(
        &self,
        want: &Want,
        source: &Arc<Source>,
        dir: Arc<[u8]>,
        format: Format,
    ) -> Option<Drafted<Slot<'f>>> {
        let Some(Ok(file)) = source.converted(format) else {
            return None;
        };
        let attr = draft::file_attr(&source.meta, file.len());
        let content = Content::Converted {
            source: source.clone(),
            file: file.clone(),
            data: want.data.clone(),
        };
        let inputs = [std::slice::from_ref(source), &want.data[..]].concat();
        Some(Drafted {
            draft: Slot::Kept(Draft::file(dir, attr, content)),
            inputs,
        })
    }

    /// The tensor directory of an unsharded file.
    fn tensors<'f>(
        &self,
        want: &Want,
        source: &'f Arc<Source>,
        dir: Arc<[u8]>,
        format: Format,
    ) -> Drafted<Slot<'f>> {
        let inputs = [std::slice::from_ref(source), &want.data[..]].concat();
        let slot = match self.kept(&dir, &inputs) {
            Some(keep) => Slot::Kept(keep),
            None => Slot::New(Build::File {
                dir,
                source,
                format,
                data: want.data.clone(),
            }),
        };
        Drafted {
            draft: slot,
            inputs,
        }
    }

    /// The index of the conversions of an index's set, while the set holds (its problems are the
    /// set's want's to report).
    fn converted_index<'f>(
        &self,
        name: &[u8],
        source: &Arc<Source>,
        dir: Arc<[u8]>,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
    ) -> Option<Drafted<Slot<'f>>> {
        let (_, merged) = self.merged(name, source, files).ok()?;
        let mut inputs = vec![source.clone()];
        inputs.extend(merged.shards.iter().cloned());
        // Made again (the whole index parsed) only when the index or a shard changed.
        let draft = match self.kept(&dir, &inputs) {
            Some(keep) => keep,
            None => indexes::converted_index(dir, source, &merged)?,
        };
        Some(Drafted {
            draft: Slot::Kept(draft),
            inputs,
        })
    }

    /// The merged directory of an index's set, checked against its shards.
    fn set<'f>(
        &self,
        want: &Want,
        name: &Arc<[u8]>,
        source: &'f Arc<Source>,
        dir: Arc<[u8]>,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
        errors: &mut Errors,
    ) -> Result<Option<Drafted<Slot<'f>>>, BuildError> {
        let (plan, merged) = match self.merged(name, source, files) {
            Ok(m) => m,
            Err(why) => {
                let why = Arc::new(why);
                refuse(
                    errors,
                    name,
                    want.what.format(),
                    FileError::Set(why.clone()),
                );
                // A shard still being written is no problem yet.
                if !why.settling() && source.first_warning(Warning::Invalid) {
                    self.policy.reject(BuildError::NoMergedDir {
                        index: self.d.path.join(OsStr::from_bytes(name)),
                        dir: String::from_utf8_lossy(&want.dir).into_owned(),
                        why,
                    })?;
                }
                return Ok(None);
            }
        };
        let mut inputs = vec![source.clone()];
        inputs.extend(merged.shards.iter().cloned());
        if let Some(keep) = self.kept(&dir, &inputs) {
            return Ok(Some(Drafted {
                draft: Slot::Kept(keep),
                inputs,
            }));
        }
        let metadata = plan.metadata.clone();
        let json = metadata
            .clone()
            .map(|m| layout::metadata_json(&Value::Object(m)));
        let Some(format) = IndexName::of(name).map(|i| i.format) else {
            return Ok(None);
        };
        let xattrs = xattrs::metadata_xattrs(
            format,
            metadata
                .iter()
                .flatten()
                .map(|(k, v)| (k, index::metadata_value_text(v))),
        );
        let shards: Vec<&Metadata> = merged.shards.iter().map(|s| &s.meta).collect();
        let attr = draft::tensor_dir_attr(&source.meta, &shards);
        let build = Build::Set {
            dir,
            path: self.d.path.join(OsStr::from_bytes(name)),
            owner: &source.meta,
            attr,
            xattrs,
            json,
            entries: merged.entries,
        };
        Ok(Some(Drafted {
            draft: Slot::New(build),
            inputs,
        }))
    }

    /// The merged directory, or the index of conversions, of the numbered set whose first shard
    /// is the file of `want`; none (and a warning, once) while the set is not whole.
    fn numbered<'f>(
        &self,
        want: &Want,
        format: Format,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
    ) -> Option<Drafted<Slot<'f>>> {
        let (name, source) = &files[want.file];
        let set = Numbered::of(format, name)?;
        let merged = numbered::check(format, &set, |n| {
            let (n, s) = files.iter().find(|(f, _)| &f[..] == n)?;
            let settled = !self.in_flux(n);
            Some(Shard {
                source: s,
                format: Some(format),
                settled,
            })
        });
        let merged = match merged {
            Ok(m) => m,
            Err(why) => {
                let warn = want.what == Wanted::Numbered(format) && !why.settling();
                if warn && source.first_warning(Warning::Unmerged) {
                    warn!(
                        "{}: {why}: the set is not merged, each shard is served on its own",
                        self.d.path.join(OsStr::from_bytes(name)).display()
                    );
                }
                return None;
            }
        };
        let dir: Arc<[u8]> = Arc::from(&want.dir[..]);
        let inputs = merged.shards.clone();
        if let Some(keep) = self.kept(&dir, &inputs) {
            return Some(Drafted {
                draft: Slot::Kept(keep),
                inputs,
            });
        }
        if want.what == Wanted::NumberedIndex(format) {
            let draft = indexes::numbered_index(dir, source, &merged)?;
            return Some(Drafted {
                draft: Slot::Kept(draft),
                inputs,
            });
        }
        let (json, xattrs) = metadata_of(format, source.describe(format).as_ref().ok()?);
        let shards: Vec<&Metadata> = merged.shards.iter().map(|s| &s.meta).collect();
        let build = Build::Set {
            dir,
            path: self.d.path.join(OsStr::from_bytes(name)),
            owner: &source.meta,
            attr: draft::tensor_dir_attr(&source.meta, &shards),
            xattrs,
            json,
            entries: merged.entries,
        };
        Some(Drafted {
            draft: Slot::New(build),
            inputs,
        })
    }

    /// The set of the index `source` (a file of `files`), checked against its shards.
    fn merged<'f>(
        &self,
        index: &[u8],
        source: &'f Arc<Source>,
        files: &'f [(Arc<[u8]>, Arc<Source>)],
    ) -> Result<(&'f Arc<Plan>, Merged), SetError> {
        let plan = source
            .plan()
            .as_ref()
            .map_err(|e| SetError::Index(e.clone()))?;
        let merged = sets::check(
            plan,
            |shard| {
                let (n, s) = files.iter().find(|(n, _)| &n[..] == shard.as_bytes())?;
                Some(Shard {
                    source: s,
                    format: sets::shard_format(index, self.format_of(n).map(|(f, _)| f)),
                    settled: !self.in_flux(n),
                })
            },
            || source.index(),
        )?;
        Ok((plan, merged))
    }

    /// The old generated entry `name` (a directory, or generated bytes) if it was made from the
    /// same sources.
    fn kept(&self, name: &Arc<[u8]>, inputs: &[Arc<Source>]) -> Option<Draft> {
        let old = self.d.shown.iter().find(|g| g.name == *name)?;
        let same = old.inputs.len() == inputs.len()
            && old
                .inputs
                .iter()
                .zip(inputs)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        let (snap, dir) = self.d.old?;
        let ino = snap.lookup(dir, name)?;
        let generated = match &snap.node(ino)?.content {
            Content::Dir(d) => d.origin == Origin::Generated,
            Content::Generated(_) => true,
            _ => false,
        };
        (same && generated).then(|| Draft {
            name: name.clone(),
            body: Body::Keep(ino),
        })
    }
}
