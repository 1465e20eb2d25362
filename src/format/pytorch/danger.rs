//! Which globals a pickle may name and still be offered as safetensors: an allow-list of what
//! `torch.save` writes for tensors and the plain data kept beside them (dicts, numpy arrays and
//! scalars, `argparse.Namespace`, Lightning's hyper-parameters). Every other global is unsafe:
//! unpickling it with Python imports its module and may call it, so what it runs is unknown. None
//! is ever imported or run here; a pickle that names one is only not offered as safetensors, and
//! the global is named.
//!
//! Names are taken as Python resolves them on load: Python 2 modules through pickle's compat map
//! (`__builtin__` is `builtins`, `cStringIO` is `io`), and a dotted name (`torch` + `os.system`,
//! which protocol 4 resolves attribute by attribute) is never on the list.

use super::dtypes::{dtype_global, storage_class};
use crate::format::kit::pickle::{Value, globals_outside};

/// The globals a checkpoint of tensors may name, by module (after the compat map): the names
/// listed, or with a trailing `*` every name with that prefix.
#[rustfmt::skip]
const ALLOWED: &[(&str, &[&str])] = &[
    // The data types the pickle itself builds, and containers of them.
    ("builtins", &["set", "frozenset", "bytearray", "bytes", "str", "int", "float", "complex",
        "bool", "slice", "range", "list", "tuple", "dict", "object"]),
    ("collections", &["OrderedDict", "defaultdict", "Counter", "deque"]),
    // How protocols 0 and 1 rebuild an instance of an allowed class, and bytes in protocol 2.
    ("copyreg", &["_reconstructor", "__newobj__", "__newobj_ex__"]),
    ("_codecs", &["encode"]),
    // What torch.save writes for tensors, parameters and their storages.
    ("torch._utils", &["_rebuild_*"]),
    ("torch._tensor", &["_rebuild_from_type", "_rebuild_from_type_v2", "Tensor"]),
    ("torch.nn.parameter", &["Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"]),
    ("torch.serialization", &["_get_layout"]),
    ("torch.storage", &["UntypedStorage", "TypedStorage"]),
    ("torch", &["Size", "Tensor", "device", "strided", "sparse_coo", "sparse_csr", "sparse_csc",
        "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged", "contiguous_format", "channels_last",
        "channels_last_3d", "preserve_format", "per_tensor_affine", "per_channel_affine",
        "per_tensor_symmetric", "per_channel_symmetric", "per_channel_affine_float_qparams"]),
    // numpy arrays and scalars (numpy 1 and 2).
    ("numpy", &["ndarray", "dtype"]),
    ("numpy.core.multiarray", &["_reconstruct", "scalar"]),
    ("numpy._core.multiarray", &["_reconstruct", "scalar"]),
    ("numpy.core.numeric", &["_frombuffer"]),
    ("numpy._core.numeric", &["_frombuffer"]),
    ("numpy.dtypes", &["*DType"]),
    // The hyper-parameters training scripts save beside the weights.
    ("argparse", &["Namespace"]),
    ("pytorch_lightning.utilities.parsing", &["AttributeDict"]),
    ("lightning_fabric.utilities.data", &["AttributeDict"]),
    ("lightning.fabric.utilities.data", &["AttributeDict"]),
    ("pathlib", &["Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"]),
    ("datetime", &["datetime", "date", "time", "timedelta", "timezone"]),
];

/// Whether the (resolved) global is one a checkpoint of tensors names.
pub(super) fn allowed(module: &str, name: &str) -> bool {
    // torch's dtypes and storage classes (`torch.float32`, `torch.FloatStorage`,
    // `torch.cuda.HalfStorage`), as the reader knows them.
    if dtype_global(module, name).is_some() || storage_class(module, name).is_some() {
        return true;
    }
    ALLOWED.iter().any(|(m, names)| {
        *m == module
            && names.iter().any(|n| match n.strip_prefix('*') {
                Some(suffix) => name.ends_with(suffix) && !name.contains('.'),
                None => match n.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix) && !name.contains('.'),
                    None => *n == name,
                },
            })
    })
}

/// Every unsafe global the values name, spelled `module.name` as Python resolves it (and as
/// written, where that differs), added to `out` once each in order of first appearance.
pub(super) fn unsafe_globals(values: &[Value], out: &mut Vec<String>) {
    globals_outside(values, allowed, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::kit::pickle::load;

    /// What a pickle of the one global `module.name` is said to name.
    fn named_global(module: &str, name: &str) -> Vec<String> {
        named(format!("c{module}\n{name}\n.").as_bytes())
    }

    fn named(pickle: &[u8]) -> Vec<String> {
        let p = load(pickle, allowed).unwrap();
        let mut out = Vec::new();
        unsafe_globals(&p.values, &mut out);
        out
    }

    #[test]
    fn unsafe_globals_are_named_once_in_order() {
        assert_eq!(
            named(
                b"\x80\x02(cos\nsystem\n(S'echo'\ntR\x8c\x08builtins\x8c\x04eval\x93\x8c\x08builtins\x8c\x03set\x93\
                  cos\nsystem\ncposixpath\njoin\ncsubprocess\nPopen\ncbuiltins\ngetattr\ncargparse\nNamespace\n\
                  ccollections\nOrderedDict\nctorch._utils\n_rebuild_tensor_v2\ncoperator\nitemgetter\n\
                  ctorch.serialization\n_get_layout\nctorch\nload\nl."
            ),
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

    /// What scanners with deny-lists let through: any global not on the list is named.
    #[test]
    fn a_global_off_the_list_is_unsafe() {
        for (module, name) in [
            ("torch.fx.experimental.symbolic_shapes", "ShapeEnv"),
            ("torch.utils.data.datapipes.utils.decoder", "basichandlers"),
            ("torch.storage", "_load_from_bytes"),
            ("codecs", "open"),
            ("zipfile", "ZipFile"),
            ("sqlite3", "connect"),
            ("torch.fx.graph_module", "_exec_with_source"),
            ("torch.utils.model_zoo", "load_url"),
            ("torch", "from_file"),
            ("numpy", "load"),
            ("pathlib", "Path.touch"),
            ("torch", "os.system"),
            ("torch._utils", "_rebuild_tensor.__globals__"),
            ("builtins", "getattr"),
        ] {
            assert_eq!(
                named_global(module, name),
                [format!("{module}.{name}")],
                "{module}.{name}"
            );
        }
    }

    /// picklescan's `sys_module_override` sample, opcode for opcode: `BUILD` on the module
    /// `torch._utils` binds `_rebuild_tensor` (an allowed name) to `'builtins'`, then to `'eval'`;
    /// the two reads of it are the operands of a `STACK_GLOBAL`, which Python resolves to
    /// `builtins.eval`, then called.
    #[test]
    fn globals_read_after_a_module_is_written_are_named_with_what_they_were_rebound_to() {
        let names = named(
            b"\x80\x04Vtorch._utils\n\x94V_rebuild_tensor\n\x94\x93\x940Vtorch\nV_utils\n\x93\x940\
              h\x03}h\x01Vbuiltins\nsb0h\x00h\x01\x93h\x03}h\x01Veval\nsb0h\x00h\x01\x93\x93\
              Vexec(1)\n\x85R.",
        );
        assert_eq!(
            names,
            [
                "torch._utils",
                "torch._utils (written into by BUILD)",
                "torch._utils._rebuild_tensor (rebound by the pickle to \"builtins\")",
                "torch._utils._rebuild_tensor (rebound by the pickle to \"eval\")",
                "builtins.eval (read after the pickle wrote into torch._utils (by BUILD))",
            ]
        );
    }

    /// Writes into `sys.modules`, a module's `__dict__`, or an allowed class, by `SETITEM`, a
    /// call of `setattr` or `BUILD`: the object is named, and so is every global read after,
    /// allowed or not.
    #[test]
    fn writes_into_modules_make_every_later_global_unsafe() {
        // sys.modules['torch._utils'] = builtins.eval's module... then an allowed global of it.
        let names = named(
            b"csys\nmodules\nVtorch._utils\ncbuiltins\nint\nsctorch._utils\n_rebuild_tensor_v2\n.",
        );
        assert!(
            names.contains(&"sys.modules (written into by SETITEM)".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(
                &"torch._utils._rebuild_tensor_v2 (read from `torch._utils`, which the pickle \
                  replaced with `builtins.int`)"
                    .to_string()
            ),
            "{names:?}"
        );
        // A module's __dict__, by SETITEM.
        let names = named(b"ctorch._utils\n__dict__\nV_rebuild_tensor_v2\nccollections\nOrderedDict\nsctorch._utils\n_rebuild_tensor_v2\n.");
        assert!(
            names.contains(
                &"torch._utils._rebuild_tensor_v2 (rebound by the pickle to `collections.OrderedDict`)"
                    .to_string()
            ),
            "{names:?}"
        );
        // setattr on an allowed class, then an allowed global.
        let names = named(b"cbuiltins\nsetattr\n(cargparse\nNamespace\nV__init__\nccollections\nOrderedDict\ntRccollections\nOrderedDict\n.");
        assert!(
            names.contains(&"argparse.Namespace (written into by a call of `setattr`)".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"collections.OrderedDict (read after the pickle wrote into argparse.Namespace (by a call of `setattr`))".to_string()),
            "{names:?}"
        );
        // BUILD of attributes into an allowed class alone is named.
        assert_eq!(
            named(b"cargparse\nNamespace\n(N}V__init__\nNstb."),
            ["argparse.Namespace (written into by BUILD)"]
        );
    }

    #[test]
    fn python_2_names_are_resolved_as_python_3_loads_them() {
        assert_eq!(
            named(b"ccStringIO\nStringIO\n."),
            ["io.StringIO (written cStringIO.StringIO)"]
        );
        assert_eq!(
            named(b"cSocketServer\nTCPServer\n."),
            ["socketserver.TCPServer (written SocketServer.TCPServer)"]
        );
        assert_eq!(
            named(b"c__builtin__\nreduce\n."),
            ["functools.reduce (written __builtin__.reduce)"]
        );
        assert_eq!(
            named(b"ccommands\ngetoutput\n."),
            ["subprocess.getoutput (written commands.getoutput)"]
        );
        // Allowed once resolved.
        for ok in [
            b"c__builtin__\nset\n.".as_slice(),
            b"c__builtin__\nxrange\n.",
            b"ccopy_reg\n_reconstructor\n.",
        ] {
            assert_eq!(named(ok), Vec::<String>::new());
        }
    }

    #[test]
    fn what_torch_save_writes_is_allowed() {
        for (module, name) in [
            ("torch._utils", "_rebuild_tensor_v2"),
            ("torch._utils", "_rebuild_parameter"),
            ("torch", "FloatStorage"),
            ("torch", "bfloat16"),
            ("torch.cuda", "HalfStorage"),
            ("torch", "Size"),
            ("collections", "OrderedDict"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "scalar"),
            ("numpy.dtypes", "Float32DType"),
            ("argparse", "Namespace"),
            ("_codecs", "encode"),
        ] {
            assert!(named_global(module, name).is_empty(), "{module}.{name}");
        }
    }
}
