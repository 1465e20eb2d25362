//! The globals whose mere presence in a pickle says the file is a trap: what unpickling it with
//! Python would run can execute commands, reach the file system or the network, or load more
//! pickles. None is ever run here; the file is only not offered as safetensors.

use std::collections::HashSet;

use super::pickle::{Pickle, Value};

/// Modules every global of which (and of their submodules) can run code, reach the file system or
/// the network, or load more pickles: from `picklescan`'s and `fickling`'s lists. A pickle that
/// names any of them is not a checkpoint torch wrote.
#[rustfmt::skip]
const DANGEROUS_MODULES: &[&str] = &[
    "os", "posix", "nt", "posixpath", "ntpath", "subprocess", "_posixsubprocess", "pty", "sys",
    "commands", "multiprocessing", "runpy", "code", "codeop", "marshal", "types", "importlib",
    "_imp", "_frozen_importlib", "_frozen_importlib_external", "zipimport", "pkgutil", "site",
    "gc", "inspect", "shutil", "tempfile", "io", "_io", "fileinput", "glob", "linecache", "mmap",
    "select", "selectors", "shelve", "socket", "socketserver", "ssl", "http", "httplib", "urllib",
    "urllib2", "requests", "aiohttp", "ftplib", "telnetlib", "smtplib", "imaplib", "poplib",
    "nntplib", "xmlrpc", "webbrowser", "asyncio", "threading", "_thread", "signal", "_signal",
    "atexit", "ctypes", "_ctypes", "pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib",
    "pip", "setuptools", "distutils", "ensurepip", "venv", "pydoc", "pdb", "bdb", "doctest",
    "timeit", "profile", "cProfile", "trace", "platform", "logging", "uuid", "pexpect", "idlelib",
    "lib2to3", "_osx_support", "_aix_support", "_pyrepl", "numpy.f2py", "numpy.testing",
    "torch.hub", "torch.jit", "torch._dynamo", "torch._inductor", "torch.utils.collect_env",
    "torch.utils.bottleneck",
];

/// Single globals that reach attributes, wrap calls or load files.
const DANGEROUS_NAMES: &[(&str, &[&str])] = &[
    ("operator", &["attrgetter", "itemgetter", "methodcaller"]),
    ("_operator", &["attrgetter", "itemgetter", "methodcaller"]),
    ("functools", &["partial", "partialmethod", "reduce"]),
    ("torch", &["load", "save"]),
    (
        "torch.serialization",
        &["load", "save", "_load", "_legacy_load"],
    ),
];

/// The builtins that only make data: every other builtin (`eval`, `exec`, `open`, `getattr`,
/// `__import__`, ...) is dangerous.
#[rustfmt::skip]
const SAFE_BUILTINS: &[&str] = &[
    "bool", "int", "float", "complex", "str", "bytes", "bytearray", "list", "tuple", "set",
    "frozenset", "dict", "slice", "range", "object", "len", "abs", "sum", "min", "max", "round",
    "pow", "divmod", "sorted", "reversed", "enumerate", "zip", "map", "filter", "iter", "next",
    "all", "any", "hash", "repr", "ascii", "bin", "hex", "oct", "ord", "chr", "isinstance",
    "issubclass", "callable", "format",
];

/// Every dangerous global the pickle names, spelled `module.name`, added to `out` once each in
/// order of first appearance.
pub(super) fn dangerous_globals(pickle: &Pickle, out: &mut Vec<String>) {
    let mut seen: HashSet<String> = out.iter().cloned().collect();
    for value in &pickle.values {
        if let Value::Global { module, name } = value
            && is_dangerous(module, name)
        {
            let spelled = format!("{module}.{name}");
            if seen.insert(spelled.clone()) {
                out.push(spelled);
            }
        }
    }
}

fn is_dangerous(module: &str, name: &str) -> bool {
    let within = |m: &str| {
        module == m
            || module
                .strip_prefix(m)
                .is_some_and(|rest| rest.starts_with('.'))
    };
    if ["builtins", "__builtin__", "__builtins__"].contains(&module) {
        return !SAFE_BUILTINS.contains(&name);
    }
    DANGEROUS_MODULES.iter().any(|m| within(m))
        || DANGEROUS_NAMES
            .iter()
            .any(|(m, names)| module == *m && names.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pytorch::pickle::load;

    #[test]
    fn dangerous_globals_are_named_once_in_order() {
        let p = load(
            b"\x80\x02(cos\nsystem\n(S'echo'\ntR\x8c\x08builtins\x8c\x04eval\x93\x8c\x08builtins\x8c\x03set\x93\
              cos\nsystem\ncposixpath\njoin\ncsubprocess\nPopen\ncbuiltins\ngetattr\ncargparse\nNamespace\n\
              ccollections\nOrderedDict\nctorch._utils\n_rebuild_tensor_v2\ncoperator\nitemgetter\n\
              ctorch.serialization\n_get_layout\nctorch\nload\nl.",
        )
        .unwrap();
        let mut out = Vec::new();
        dangerous_globals(&p, &mut out);
        assert_eq!(
            out,
            [
                "os.system",
                "builtins.eval",
                "posixpath.join",
                "subprocess.Popen",
                "builtins.getattr",
                "operator.itemgetter",
                "torch.load"
            ]
        );
    }
}
