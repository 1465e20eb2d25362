//! Pickles that are traps: checkpoints whose pickles call a global that runs code, writes a file
//! or opens a connection when `torch.load(weights_only=False)` unpickles them. None may be
//! offered as safetensors, each must be named, nothing may run; real checkpoints beside them
//! must still be converted.
//!
//! The samples are written by `tests/python/traps.py` (the evasions of deny-list scanners, and
//! real checkpoints) and `tests/python/corpus.py` (picklescan's, modelscan's and fickling's own
//! samples and advisories, rebuilt); each trap is proven one by the oracle, which loads it with
//! `torch.load(weights_only=False)` in a child process and sees its canary fire (a marker file
//! created, a connection to a listener of its own), and the global it must be named by is the
//! one the sample was built with, never tensormount's output.

use crate::common::*;

use std::path::Path;

use serde_json::Value;

use super::pytorch::{error_of, names_global, touch_everything, virtual_name};

/// Writes the samples of `script` (`write DIR MARKER`), checks that it wrote `count`, mounts
/// them, and checks each: a trap (`named` a global) is not offered as safetensors, its
/// `user.tensormount.error` and one warning line name its file and the global; a file `refused`
/// for a rule (and `named` null) is not offered either, and its error and a warning line name the
/// rule; a clean checkpoint is converted with no error; `also(file, want, error)` checks more of
/// each trap. Then, where `single` says so, each as a single-file SOURCE (see
/// [`single_file_is_named`]: a mount each, so not for the larger corpus). Returns what the script
/// printed.
fn traps_are_named(
    script: &str,
    count: usize,
    single: bool,
    also: impl Fn(&str, &Value, &str),
) -> Value {
    require_fuse();
    let py = python();
    let marker_dir = TempDir::new("pickle-trap-marker");
    let marker = marker_dir.join("MARKER");
    let tmp = TempDir::new("pickle-traps");
    let fx = tmp.join("fx");
    let wrote = json(&python_script(&py, script, &["write", s(&fx), s(&marker)]));
    let m = mount_ok(&fx, "");
    touch_everything(&m.dir);
    assert_eq!(wrote.as_object().unwrap().len(), count, "{wrote:?}");
    for (file, want) in wrote.as_object().unwrap() {
        let virt = m.path(virtual_name(file));
        let error = error_of(&m.path(file));
        match want["named"].as_str() {
            Some(global) => {
                assert!(!virt.exists(), "{file}: offered as safetensors");
                let error = error.unwrap_or_else(|| panic!("{file}: no user.tensormount.error"));
                assert!(
                    error.contains(global),
                    "{file}: {global} not named: {error}"
                );
                assert!(error.contains("nothing was run"), "{file}: {error}");
                assert!(
                    m.stderr
                        .lines()
                        .any(|l| l.contains(file.as_str()) && l.contains(global)),
                    "{file}: no warning naming {global}: {}",
                    m.stderr
                );
                also(file, want, &error);
            }
            None => match want["refused"].as_str() {
                // Refused for the rule it breaks (an archive torch itself refuses).
                Some(rule) => {
                    assert!(!virt.exists(), "{file}: offered as safetensors");
                    let error = error.unwrap_or_else(|| panic!("{file}: no error"));
                    assert!(error.contains(rule), "{file}: not {rule}: {error}");
                    assert!(
                        m.stderr
                            .lines()
                            .any(|l| l.contains(file.as_str()) && l.contains(rule)),
                        "{file}: no warning naming {rule}: {}",
                        m.stderr
                    );
                }
                None => {
                    assert!(virt.is_file(), "{file}: not converted: {error:?}");
                    assert_eq!(error, None, "{file}");
                }
            },
        }
    }
    m.unmount().unwrap();
    for (file, want) in wrote.as_object().unwrap().iter().filter(|_| single) {
        single_file_is_named(&fx.join(file), want["named"].as_str());
    }
    assert!(!marker.exists(), "a trap ran");
    wrote
}

/// `file` as SOURCE itself, where its tensors are the root: a trap (`named` a global) is named
/// by `--list` on stderr (with its tensors listed, or refused), and where it is mounted, by the
/// root's `user.tensormount.error` and a warning line of the mount; a clean checkpoint is listed
/// with no such warning.
fn single_file_is_named(file: &Path, named: Option<&str>) {
    let list = run(&["--list", s(file)]);
    let err = stderr(&list);
    let Some(global) = named else {
        assert!(list.status.success(), "{}: {err}", file.display());
        assert!(
            !err.contains("nothing was run"),
            "{}: {err}",
            file.display()
        );
        return;
    };
    let warned = |text: &str| {
        text.lines()
            .any(|l| l.contains(s(file)) && l.contains(global) && l.contains("nothing was run"))
    };
    assert!(
        warned(&err),
        "{}: --list does not name {global}: {err}",
        file.display()
    );
    if !list.status.success() {
        return;
    }
    let m = mount_ok(file, "");
    let (error, warnings) = (error_of(&m.dir), m.stderr.clone());
    m.unmount().unwrap();
    let error = error.unwrap_or_else(|| panic!("{}: no user.tensormount.error", file.display()));
    assert!(
        error.contains(global),
        "{}: {global} not named: {error}",
        file.display()
    );
    assert!(
        warned(&warnings),
        "{}: no warning naming {global}: {warnings}",
        file.display()
    );
}

/// The evasions of deny-list scanners (globals off their lists, dotted protocol-4 names, Python 2
/// aliases, escaped protocol-0 strings, computed `STACK_GLOBAL` operands, a pickle that fails
/// after its call, a trap with no tensors, containers read as torch reads them): each is named,
/// none is offered as safetensors. Real checkpoints beside them (bf16, tied weights, optimizer
/// state with `argparse` arguments, numpy arrays and scalars, counters and sets, Lightning's
/// hyper-parameters, protocol 4, a legacy magic number spelled another way) are converted with no
/// error.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn traps_off_every_deny_list_are_named_and_real_checkpoints_are_not() {
    traps_are_named("traps.py", 33, true, |_, _, _| {});
}

/// The scanners' own corpora: picklescan's test samples (by protocol, by opcode: INST, OBJ,
/// memoised `STACK_GLOBAL` operands, nested pickles, zip flags and CRCs that Python's zipfile
/// refuses and torch ignores) and one sample per global of its deny-list and advisories,
/// modelscan's samples and bypasses (dotted `GLOBAL`s, `BUILD` that sets the names, `dict.get`
/// of `numpy.__builtins__`, names joined at load), fickling's (network clients, a call by `OBJ`
/// whose result is popped, `marshal`, `multiprocessing`, any file extension, callables as
/// `pickle.dumps` writes them at every protocol). Each is named
/// (what picklescan calls dangerous in it too) and none is offered as safetensors.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn the_scanners_own_samples_are_all_named_and_none_is_offered_as_safetensors() {
    // picklescan as a second oracle: every global it calls dangerous is named too (but its
    // `unknown.unknown`, for a name it cannot tell, which the refusal names its own way).
    let wrote = traps_are_named("corpus.py", 159, false, |file, want, error| {
        for g in want["picklescan"].as_array().unwrap() {
            let g = g.as_str().unwrap();
            assert!(
                g == "unknown.unknown" || names_global(error, g),
                "{file}: picklescan's {g} not named: {error}"
            );
        }
    });
    let samples = wrote.as_object().unwrap();
    let flagged = samples
        .values()
        .filter(|w| !w["picklescan"].as_array().unwrap().is_empty())
        .count();
    eprintln!(
        "picklescan calls {flagged} of the {} samples dangerous; each is named here",
        samples.len()
    );
}

/// Archives that torch's reader (miniz) and other zip readers see differently (the pickle
/// scanners' 2025 CVEs): two records of one name (the malicious one first, and last), a Unicode
/// Path extra field renaming the malicious `data.pkl`, an end record that counts one record fewer
/// (hiding a clean duplicate from torch) or one more, a broken second end record after a whole
/// archive, a second directory whose `data.pkl` is malicious, a local header that names its
/// record otherwise, a top folder taken from the first record; and a pickle that rewrites a
/// module's attributes (picklescan's `sys_module_override`) and reaches `builtins.eval`. Each is
/// proven by torch: `torch.load` runs it (each is named as a trap, and the rule it also breaks),
/// or refuses the archive (each is refused with the rule). The clean archive is converted.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn archives_read_as_torch_reads_them_name_every_trap_whichever_record_torch_takes() {
    let wrote = traps_are_named("ziptraps.py", 11, false, |file, want, error| {
        if let Some(rule) = want["refused"].as_str() {
            assert!(error.contains(rule), "{file}: not {rule}: {error}");
        }
    });
    let runs = wrote.as_object().unwrap().values();
    assert_eq!(runs.filter(|w| w["torch"] == "runs").count(), 7);
}
