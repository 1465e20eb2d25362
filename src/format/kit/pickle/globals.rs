//! The globals a pickle names, as Python resolves them on load: Python 2 modules through pickle's
//! compat map (`__builtin__` is `builtins`, `cStringIO` is `io`), and those outside an allow-list
//! (which the format that reads the pickle brings), each spelled once, as a refusal names them.
//! A dotted name (`torch` + `os.system`, which protocol 4 resolves attribute by attribute) is on
//! no list.

use std::collections::HashSet;

use super::value::Value;

/// Whether a global (its module and name, as Python resolves them) is one a format's files may
/// name: the allow-list a format passes to the machine.
pub type Allowed = fn(&str, &str) -> bool;

/// Python 2 module names as `_compat_pickle.IMPORT_MAPPING` maps them when Python 3 loads a
/// pickle (those whose globals a checkpoint could name).
#[rustfmt::skip]
const PY2_MODULES: &[(&str, &str)] = &[
    ("__builtin__", "builtins"), ("copy_reg", "copyreg"), ("Queue", "queue"),
    ("SocketServer", "socketserver"), ("ConfigParser", "configparser"), ("repr", "reprlib"),
    ("tkFileDialog", "tkinter.filedialog"), ("tkSimpleDialog", "tkinter.simpledialog"),
    ("tkColorChooser", "tkinter.colorchooser"), ("tkCommonDialog", "tkinter.commondialog"),
    ("Dialog", "tkinter.dialog"), ("Tkdnd", "tkinter.dnd"), ("tkFont", "tkinter.font"),
    ("tkMessageBox", "tkinter.messagebox"), ("ScrolledText", "tkinter.scrolledtext"),
    ("Tkconstants", "tkinter.constants"), ("Tix", "tkinter.tix"), ("ttk", "tkinter.ttk"),
    ("Tkinter", "tkinter"), ("markupbase", "_markupbase"), ("_winreg", "winreg"),
    ("thread", "_thread"), ("dummy_thread", "_dummy_thread"), ("dbhash", "dbm.bsd"),
    ("dumbdbm", "dbm.dumb"), ("dbm", "dbm.ndbm"), ("gdbm", "dbm.gnu"), ("xmlrpclib", "xmlrpc.client"),
    ("DocXMLRPCServer", "xmlrpc.server"), ("SimpleXMLRPCServer", "xmlrpc.server"),
    ("httplib", "http.client"), ("htmlentitydefs", "html.entities"), ("HTMLParser", "html.parser"),
    ("Cookie", "http.cookies"), ("cookielib", "http.cookiejar"), ("BaseHTTPServer", "http.server"),
    ("test.test_support", "test.support"), ("commands", "subprocess"), ("urlparse", "urllib.parse"),
    ("robotparser", "urllib.robotparser"), ("urllib2", "urllib.request"), ("anydbm", "dbm"),
    ("_abcoll", "collections.abc"), ("cPickle", "pickle"), ("_elementtree", "xml.etree.ElementTree"),
    ("FileDialog", "tkinter.filedialog"), ("SimpleDialog", "tkinter.simpledialog"),
    ("SimpleHTTPServer", "http.server"),
    ("CGIHTTPServer", "http.server"), ("UserDict", "collections"), ("UserList", "collections"),
    ("UserString", "collections"), ("whichdb", "dbm"), ("StringIO", "io"), ("cStringIO", "io"),
];

/// A global: its module and name.
type Global = (&'static str, &'static str);

/// Python 2 globals that `_compat_pickle.NAME_MAPPING` moves to another module or name (those
/// that matter here: the builtins).
#[rustfmt::skip]
const PY2_NAMES: &[(Global, Global)] = &[
    (("__builtin__", "xrange"), ("builtins", "range")),
    (("__builtin__", "reduce"), ("functools", "reduce")),
    (("__builtin__", "intern"), ("sys", "intern")),
    (("__builtin__", "unichr"), ("builtins", "chr")),
    (("__builtin__", "unicode"), ("builtins", "str")),
    (("__builtin__", "long"), ("builtins", "int")),
    (("__builtin__", "basestring"), ("builtins", "str")),
    (("itertools", "izip"), ("builtins", "zip")),
    (("itertools", "imap"), ("builtins", "map")),
    (("itertools", "ifilter"), ("builtins", "filter")),
    (("UserDict", "IterableUserDict"), ("collections", "UserDict")),
    (("UserList", "UserList"), ("collections", "UserList")),
    (("UserDict", "UserDict"), ("collections", "UserDict")),
    (("UserString", "UserString"), ("collections", "UserString")),
];

/// `module.name` as Python 3 resolves it when it loads the pickle: through the compat map of
/// Python 2 names.
pub fn resolved(module: &str, name: &str) -> (String, String) {
    if let Some((_, (m, n))) = PY2_NAMES.iter().find(|(from, _)| *from == (module, name)) {
        return (m.to_string(), n.to_string());
    }
    let module = PY2_MODULES
        .iter()
        .find(|(from, _)| *from == module)
        .map_or(module, |(_, to)| to);
    (module.to_string(), name.to_string())
}

/// Every global the values name that `allowed`
/// (given the name as Python resolves it) does not allow, or that is unsafe whatever its name.
pub fn globals_outside(
    values: &[Value],
    allowed: impl Fn(&str, &str) -> bool,
    out: &mut Vec<String>,
) {
    let mut seen: HashSet<String> = out.iter().cloned().collect();
    for value in values {
        let spelled = match value {
            Value::Global {
                module,
                name,
                after_write: Some(why),
            } => format!("{module}.{name} ({why})"),
            Value::Global { module, name, .. } => {
                let (m, n) = resolved(module, name);
                if allowed(&m, &n) {
                    continue;
                }
                match (&*m, &*n) == (&**module, &**name) {
                    true => format!("{m}.{n}"),
                    false => format!("{m}.{n} (written {module}.{name})"),
                }
            }
            Value::ComputedGlobal => {
                "a global whose name the pickle computes (STACK_GLOBAL of values that are not \
                 strings)"
                    .to_string()
            }
            _ => continue,
        };
        if seen.insert(spelled.clone()) {
            out.push(spelled);
        }
    }
}

/// `names` (as [`globals_outside`] spells them) added to `out`, those not in it yet.
pub fn merge(out: &mut Vec<String>, names: Vec<String>) {
    for name in names {
        if !out.contains(&name) {
            out.push(name);
        }
    }
}
