//! The views (-o npy, -o dtype=f32, -o layout=tree) of checkpoint tensors, and -o pickle=off.

use super::*;

/// Items 6 and 7: `-o npy`, `-o dtype=f32` and `-o layout=tree` apply to checkpoint tensors as
/// to safetensors tensors; `-o pickle=off` leaves checkpoints plain mirrored files.
#[test]
#[cfg_attr(not(tensormount_fuse), ignore = "needs root and /dev/fuse")]
fn views_apply_to_checkpoint_tensors_and_pickle_off_leaves_plain_files() {
    let (py, tmp, _) = write("pickle-views", &["write-fixtures", "--only", "core"]);
    let fx = tmp.join("fx");
    let pairs = |m: &Mounted| -> Vec<(PathBuf, PathBuf)> {
        ["pytorch_model.bin", "legacy.pt", "lightning.ckpt"]
            .iter()
            .map(|rel| (fx.join(rel), m.path(tensors_dir(rel))))
            .collect()
    };

    // -o npy,layout=tree: names split on `.` and `/` into directories, and numpy.load of each
    // X.npy equals torch's tensor, for the dtypes numpy has.
    let m = mount_ok(&fx, "npy,layout=tree");
    for (path, name) in [
        (
            "lightning.tensors/state_dict/model/layer/weight",
            "state_dict.model.layer.weight",
        ),
        (
            "lightning.tensors/optimizer_states/0/state/0/exp_avg",
            "optimizer_states.0.state.0.exp_avg",
        ),
        ("pytorch_model.tensors/weird%25name/x", "weird%name/x"),
        ("pytorch_model.tensors/tied/twin", "tied.twin"),
        ("pytorch_model.tensors/f32.npy", "f32"),
    ] {
        assert_eq!(
            getxattr(&m.path(path), "user.safetensors.name").as_deref(),
            Some(name),
            "{path}"
        );
    }
    assert!(!m.path("pytorch_model.tensors/bf16.npy").exists());
    check_mount(&py, &["--npy"], &pairs(&m));
    drop(m);

    // -o dtype=f32: BF16, F16 and F8 as torch's .float().
    let m = mount_ok(&fx, "dtype=f32");
    let bf16 = m.path("pytorch_model.tensors/bf16");
    assert_eq!(
        getxattr(&bf16, "user.safetensors.dtype").as_deref(),
        Some("F32")
    );
    assert_eq!(
        getxattr(&bf16, "user.safetensors.source_dtype").as_deref(),
        Some("BF16")
    );
    check_mount(&py, &["--widen", "f32"], &pairs(&m));
    drop(m);

    // -o pickle=off: the source's entries, and nothing for the checkpoints.
    let m = mount_ok(&fx, "pickle=off");
    assert_eq!(
        names(&m.dir),
        set(&[
            "legacy.pt",
            "lightning.ckpt",
            "nested.pth",
            "pytorch_model.bin",
            "pytorch_model.fp16.bin",
            "realwins",
            "unet",
        ])
    );
    assert_eq!(
        names(&m.path("unet")),
        set(&["diffusion_pytorch_model.bin"])
    );
    assert_eq!(
        names(&m.path("realwins")),
        set(&["model.safetensors", "model.tensors", "pytorch_model.bin"])
    );
    for rel in [
        "pytorch_model.bin",
        "legacy.pt",
        "unet/diffusion_pytorch_model.bin",
    ] {
        assert!(
            fs::read(m.path(rel)).unwrap() == fs::read(fx.join(rel)).unwrap(),
            "{rel}"
        );
        assert_eq!(error_of(&m.path(rel)), None, "{rel}");
    }
}
