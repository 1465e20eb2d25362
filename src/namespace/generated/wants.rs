//! What each file of a directory asks for: a tensor directory and a virtual file for a descriptor, a merged directory and an index of conversions for an index.

use super::*;

impl Step<'_> {
    /// What each file asks for: `NAME.tensors` for a valid unsharded file, a merged directory for
    /// an index. Files that cannot have theirs get their error.
    pub(super) fn wants(
        &self,
        files: &[(Arc<[u8]>, Arc<Source>)],
        open: &mut dyn FnMut(&Path) -> Option<Arc<Source>>,
        errors: &mut Errors,
    ) -> Result<Vec<Want>, BuildError> {
        let mut wants = Vec::new();
        for (i, (name, source)) in files.iter().enumerate() {
            if !self.interpretable(name) {
                continue;
            }
            if let Some((format, stem)) = self.format_of(name) {
                if self.in_flux(name) {
                    refuse(errors, name, format, self.being_written());
                    continue;
                }
                match source.describe_in(format, Some(self.d.path)) {
                    Ok(d) => {
                        if !d.notes.is_empty() && source.first_warning(Warning::Notes) {
                            d.notes.iter().for_each(|note| warn!("{note}"));
                        }
                        let found = data_files::find(d, self.d.path, files, open, |name| {
                            self.in_flux(name).then(|| self.being_written())
                        });
                        let data = match found {
                            Ok(data) => data,
                            Err(e) => {
                                let settling = matches!(e, FileError::BeingWritten(_));
                                if !settling && source.first_warning(Warning::Invalid) {
                                    warn!("{}: {e}", source.path.display());
                                }
                                refuse(errors, name, format, e);
                                continue;
                            }
                        };
                        // A checkpoint without tensors (training arguments, an optimizer's
                        // hyperparameters) gets no empty directory.
                        if format.empty_dir() || !d.tensors.is_empty() {
                            wants.push(Want {
                                file: i,
                                dir: [stem, b".tensors"].concat(),
                                what: Wanted::Tensors(format),
                                data: data.clone(),
                            });
                        }
                        match source.converted(format) {
                            Some(Ok(_)) => wants.push(Want {
                                file: i,
                                dir: format.converted_name(stem).unwrap_or_default(),
                                what: Wanted::Converted(format),
                                data: data.clone(),
                            }),
                            // A trap is said of it with tensors or without.
                            Some(Err(why))
                                if !d.tensors.is_empty()
                                    || matches!(&d.conversion, Some(Err(e)) if e.is_trap()) =>
                            {
                                refuse(errors, name, format, FileError::NotConverted(why.clone()));
                            }
                            _ => {}
                        }
                        let first = Numbered::of(format, name).filter(|s| s.no == 1 && s.count > 1);
                        if let Some(set) = first {
                            let dir = [&set.base[..], b".tensors"].concat();
                            wants.push(Want {
                                file: i,
                                dir,
                                what: Wanted::Numbered(format),
                                data: Arc::from([]),
                            });
                            if let Some(file) = format.converted_name(&set.base) {
                                wants.push(Want {
                                    file: i,
                                    dir: [&file[..], b".index.json"].concat(),
                                    what: Wanted::NumberedIndex(format),
                                    data: Arc::from([]),
                                });
                            }
                        }
                    }
                    Err(e) if e.is_foreign() => {}
                    Err(e) => {
                        if source.first_warning(Warning::Invalid) {
                            if !self.policy.mounting && e.cut_short() {
                                // Most likely still being written, by a writer that paused.
                                log::info!("{e} (no .tensors directory; incomplete so far)");
                            } else {
                                self.policy.reject(BuildError::NoTensorsDir(e.clone()))?;
                            }
                        }
                        refuse(errors, name, format, FileError::Invalid(e.clone()));
                    }
                }
            } else if let Some((format, dir)) = self.merged_dir(name) {
                wants.push(Want {
                    file: i,
                    dir: dir.into_bytes(),
                    what: Wanted::Set(format),
                    data: Arc::from([]),
                });
                if let Some(converted) = IndexName::of(name).and_then(|i| i.converted) {
                    wants.push(Want {
                        file: i,
                        dir: converted,
                        what: Wanted::ConvertedIndex(format),
                        data: Arc::from([]),
                    });
                }
            }
        }
        Ok(wants)
    }
}
