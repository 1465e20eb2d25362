# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tensormount_global_optspecs
    string join \n f/foreground log-file= n s v N= t= o= list json h/help V/version
end

function __fish_tensormount_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tensormount_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tensormount_using_subcommand
    set -l cmd (__fish_tensormount_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tensormount -n "__fish_tensormount_needs_command" -l log-file -d 'Append log records to PATH instead of stderr (or syslog, in the background)' -r -F
complete -c tensormount -n "__fish_tensormount_needs_command" -s N -d 'mount(8) helper option (mount namespace): accepted and ignored' -r
complete -c tensormount -n "__fish_tensormount_needs_command" -s t -d 'mount(8) helper option: the filesystem type, `fuse.tensormount` or `tensormount`' -r
complete -c tensormount -n "__fish_tensormount_needs_command" -s o -d 'Mount options, comma-separated (`\\,` for a literal comma); may be repeated. See below' -r -f -a "allow_other\t'other users may use the mount; the kernel still checks each file\'s permission bits'
allow_root\t'root may use the mount too'
auto_unmount\t'a watcher process unmounts once the daemon is gone, however it ends (SIGKILL included)'
fsname=\t'the device column of /proc/mounts (default: the absolute source path)'
strict\t'any invalid safetensors file or broken index fails the mount instead of a warning'
npy\t'a NAME.npy view beside each tensor numpy can describe'
dtype=f32\t'every floating-point tensor narrower than the type (BF16, F16, F8_*, F4; F32 under f64) is presented as its exact widening to it, and every quantized GGUF tensor as its values (as gguf-py dequantizes them)'
dtype=f64\t'every floating-point tensor narrower than the type (BF16, F16, F8_*, F4; F32 under f64) is presented as its exact widening to it, and every quantized GGUF tensor as its values (as gguf-py dequantizes them)'
pickle=on\t'PyTorch checkpoints (.bin, .pt, .pth, .ckpt) get NAME.tensors/ and a virtual safetensors file, their pickle read without running any of it (on, the default); off: plain mirrored files (pytorch=off too)'
pickle=off\t'PyTorch checkpoints (.bin, .pt, .pth, .ckpt) get NAME.tensors/ and a virtual safetensors file, their pickle read without running any of it (on, the default); off: plain mirrored files (pytorch=off too)'
gguf=on\t'GGUF files (.gguf) get NAME.tensors/ with one raw file per tensor (ggml blocks as stored) and their metadata as user.gguf.*, and a virtual NAME.safetensors (quantized tensors as float32); split sets are merged (on, the default); off: plain mirrored files'
gguf=off\t'GGUF files (.gguf) get NAME.tensors/ with one raw file per tensor (ggml blocks as stored) and their metadata as user.gguf.*, and a virtual NAME.safetensors (quantized tensors as float32); split sets are merged (on, the default); off: plain mirrored files'
onnx=on\t'ONNX models (.onnx) get NAME.tensors/ with one raw file per tensor (initializers and Constant nodes, subgraphs and functions included) and their producer, opsets and metadata as user.onnx.*, and a virtual NAME.safetensors (on, the default); off: plain mirrored files'
onnx=off\t'ONNX models (.onnx) get NAME.tensors/ with one raw file per tensor (initializers and Constant nodes, subgraphs and functions included) and their producer, opsets and metadata as user.onnx.*, and a virtual NAME.safetensors (on, the default); off: plain mirrored files'
ollama=on\t'an ollama model store (a directory with manifests/ and blobs/) gets by-name/, every model by the name ollama list gives it, with model.gguf and its views, its other layers as files and a Modelfile (on, the default); off: plain mirrored files'
ollama=off\t'an ollama model store (a directory with manifests/ and blobs/) gets by-name/, every model by the name ollama list gives it, with model.gguf and its views, its other layers as files and a Modelfile (on, the default); off: plain mirrored files'
dcp=on\t'torch.distributed.checkpoint directories (a .metadata and its .distcp files) get checkpoint.tensors/ with every tensor consolidated from its chunks on read, and a virtual model.safetensors of the model\'s tensors, .metadata read without running any of it (on, the default); off: plain mirrored files'
dcp=off\t'torch.distributed.checkpoint directories (a .metadata and its .distcp files) get checkpoint.tensors/ with every tensor consolidated from its chunks on read, and a virtual model.safetensors of the model\'s tensors, .metadata read without running any of it (on, the default); off: plain mirrored files'
dcp_model=auto\t'which tensors of a DCP checkpoint model.safetensors holds: auto (the default), the model group\'s (its prefix removed), else every top-level tensor outside optim, optimizer, lr_scheduler, dataloader, train_state and extra; all: every tensor, keys as stored; GROUP: the tensors whose keys start with GROUP. (prefix removed)'
dcp_model=all\t'which tensors of a DCP checkpoint model.safetensors holds: auto (the default), the model group\'s (its prefix removed), else every top-level tensor outside optim, optimizer, lr_scheduler, dataloader, train_state and extra; all: every tensor, keys as stored; GROUP: the tensors whose keys start with GROUP. (prefix removed)'
dcp_model=GROUP\t'which tensors of a DCP checkpoint model.safetensors holds: auto (the default), the model group\'s (its prefix removed), else every top-level tensor outside optim, optimizer, lr_scheduler, dataloader, train_state and extra; all: every tensor, keys as stored; GROUP: the tensors whose keys start with GROUP. (prefix removed)'
verify\t'hash in the background, one file at a time and last in line, every weight file whose SHA-256 SOURCE records; user.tensormount.verified says ok or mismatch, and a mismatched file and its tensor files then fail reads with EIO'
layout=flat\t'tensor files named after the whole name (flat, the default), or in directories split on `.` and `/`'
layout=tree\t'tensor files named after the whole name (flat, the default), or in directories split on `.` and `/`'
refresh=auto\t'how the mount follows SOURCE (default auto: inotify where SOURCE is local, polling on network and FUSE filesystems; off: never)'
refresh=inotify\t'how the mount follows SOURCE (default auto: inotify where SOURCE is local, polling on network and FUSE filesystems; off: never)'
refresh=poll\t'how the mount follows SOURCE (default auto: inotify where SOURCE is local, polling on network and FUSE filesystems; off: never)'
refresh=off\t'how the mount follows SOURCE (default auto: inotify where SOURCE is local, polling on network and FUSE filesystems; off: never)'
refresh_interval=\t'the polling period, default 30 (fractions allowed)'
settle=\t'how long a file seen changing in place must stay unchanged before it is interpreted again, default 1'
source_idle=\t'a source unused for this long is closed, default 30'
decode_cache=\t'the most bytes of decoded chunks (compressed or byte-swapped tensors) kept, so that a sequential read decodes each chunk once; default 256M (K, M and G allowed; 0 keeps none)'
direct_io\t'the default: files the kernel does not read straight from a local source (tensor files, views, virtual files) are read with direct I/O, so their bytes are cached once, in the source\'s page cache (reading a 1 GiB tensor file twice adds 0.8 MiB); first reads as fast as kernel_cache\'s, rereads slower; mappings still work (Linux 6.6+; older kernels get kernel_cache)'
kernel_cache\t'those files are cached by the mount too, kept across opens: rereads of bytes already read are faster (a 1 GiB tensor file 0.72x the source instead of 0.46x, 4 KiB random rereads 0.74x instead of 0.07x), at the cost of a second copy of every byte read in the page cache (1 GiB for that file)'
noexec\t'passed to the kernel'
rw\t'accepted, as mount(8) always passes it: the mount is always read-only'"
complete -c tensormount -n "__fish_tensormount_needs_command" -s f -l foreground -d 'Stay in the foreground; SIGINT or SIGTERM unmounts and exits. Invoked as `mount.tensormount`, `-f` is mount(8)\'s "fake": exit 0 without mounting'
complete -c tensormount -n "__fish_tensormount_needs_command" -s n -d 'mount(8) helper flag (no mtab): ignored'
complete -c tensormount -n "__fish_tensormount_needs_command" -s s -d 'mount(8) helper flag (sloppy): ignored'
complete -c tensormount -n "__fish_tensormount_needs_command" -s v -d 'mount(8) helper flag (verbose): ignored'
complete -c tensormount -n "__fish_tensormount_needs_command" -l list -d 'Mount nothing: validate SOURCE as a mount would and print one row per tensor'
complete -c tensormount -n "__fish_tensormount_needs_command" -l json -d 'With --list: print JSON instead of a table (the tensors, and each tensor directory\'s metadata)'
complete -c tensormount -n "__fish_tensormount_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tensormount -n "__fish_tensormount_needs_command" -s V -l version -d 'Print version'
complete -c tensormount -n "__fish_tensormount_needs_command" -a "verify" -d 'Check every weight file of SOURCE against the SHA-256 its source records'
complete -c tensormount -n "__fish_tensormount_needs_command" -a "diff" -d 'Compare the tensors of two checkpoints or model directories'
complete -c tensormount -n "__fish_tensormount_using_subcommand verify" -l write-manifest -d 'Also write the SHA-256 of every file and of every tensor\'s bytes to FILE (JSON)' -r -F
complete -c tensormount -n "__fish_tensormount_using_subcommand verify" -l manifest -d 'Check files and tensors against a manifest written by --write-manifest, naming each damaged tensor' -r -F
complete -c tensormount -n "__fish_tensormount_using_subcommand verify" -l json -d 'Print one JSON object instead of one line per file'
complete -c tensormount -n "__fish_tensormount_using_subcommand verify" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tensormount -n "__fish_tensormount_using_subcommand diff" -l json -d 'Print one JSON object instead of text'
complete -c tensormount -n "__fish_tensormount_using_subcommand diff" -l values -d 'For floating-point tensors whose bytes differ: how many elements differ, and the largest absolute difference'
complete -c tensormount -n "__fish_tensormount_using_subcommand diff" -s h -l help -d 'Print help (see more with \'--help\')'
