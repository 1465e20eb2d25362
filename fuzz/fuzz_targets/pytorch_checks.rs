//! What the `pickle` and `checkpoint` targets check of a PyTorch checkpoint's description.

use std::sync::Arc;

use tensormount::format::Description;

/// Panics unless every tensor lies inside the file (each element a strided one can reach), the
/// tensors are in data order, the notes are bounded and the conversion's tensors are the listed
/// ones.
pub fn check(d: &Description, file_len: u64) {
    assert!(matches!(d.kind, "pytorch-zip" | "pytorch-legacy"));
    assert_eq!(d.data_start, 0);
    assert!(d.notes.len() <= 101, "{} notes", d.notes.len());
    for t in &d.tensors {
        let size = t.element_size();
        let numel = t
            .shape
            .iter()
            .try_fold(1u64, |n, &s| n.checked_mul(s as u64))
            .unwrap();
        assert!(
            t.begin <= t.end && t.begin <= file_len,
            "{t:?} in {file_len} bytes"
        );
        assert_eq!(t.end - t.begin, numel * size, "{t:?}");
        match &t.strides {
            None => assert!(t.end <= file_len, "{t:?} in {file_len} bytes"),
            Some(strides) => {
                assert_eq!(strides.len(), t.shape.len());
                assert!(numel > 0);
                let reach: u64 = t
                    .shape
                    .iter()
                    .zip(strides.iter())
                    .map(|(&d, &s)| (d as u64 - 1) * s)
                    .sum();
                assert!(
                    t.begin + (reach + 1) * size <= file_len,
                    "{t:?} in {file_len} bytes"
                );
            }
        }
    }
    assert!(
        d.tensors
            .windows(2)
            .all(|w| (w[0].begin, &w[0].name) <= (w[1].begin, &w[1].name))
    );
    match &d.conversion {
        Some(Ok(conversion)) => {
            assert!(!conversion.state_dict.is_empty());
            for (_, t) in &conversion.state_dict {
                assert!(d.tensors.iter().any(|u| Arc::ptr_eq(u, t)));
            }
        }
        Some(Err(why)) => assert!(!why.to_string().is_empty()),
        None => panic!("no conversion"),
    }
}
