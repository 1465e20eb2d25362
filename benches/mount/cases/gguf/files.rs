//! The GGUF files the rows read, written here: GGUF v3, little-endian, llama.cpp's tensor names and order.

use super::*;

/// Writes a GGUF v3 file (little-endian) of `metadata` and `tensors`, each tensor's data at the next multiple of [`ALIGN`]; the data section is a hole
/// (`Fill::Hole`) or random blocks ([`random_tensor`]), synced to disk. Returns each tensor's
/// absolute offset.
pub(super) fn write_gguf(
    path: &Path,
    metadata: &[(&str, Kv)],
    tensors: &[Tensor],
    fill: Fill,
) -> Res<Vec<u64>> {
    fn string(h: &mut Vec<u8>, s: &str) {
        h.extend_from_slice(&(s.len() as u64).to_le_bytes());
        h.extend_from_slice(s.as_bytes());
    }
    let mut h = b"GGUF".to_vec();
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    h.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        string(&mut h, key);
        match value {
            Kv::U32(n) => {
                h.extend_from_slice(&4u32.to_le_bytes()); // UINT32
                h.extend_from_slice(&n.to_le_bytes());
            }
            Kv::Str(s) => {
                h.extend_from_slice(&8u32.to_le_bytes()); // STRING
                string(&mut h, s);
            }
            Kv::Tokens(n) | Kv::Scores(n) | Kv::TokenTypes(n) => {
                h.extend_from_slice(&9u32.to_le_bytes()); // ARRAY
                let ty: u32 = match value {
                    Kv::Tokens(_) => 8, // STRING
                    Kv::Scores(_) => 6, // FLOAT32
                    _ => 5,             // INT32
                };
                h.extend_from_slice(&ty.to_le_bytes());
                h.extend_from_slice(&n.to_le_bytes());
                for i in 0..*n {
                    match value {
                        Kv::Tokens(_) => string(&mut h, &format!("\u{2581}tok{i}")),
                        Kv::Scores(_) => h.extend_from_slice(&(-(i as f32)).to_le_bytes()),
                        _ => h.extend_from_slice(&1i32.to_le_bytes()),
                    }
                }
            }
        }
    }
    let mut relative = Vec::with_capacity(tensors.len());
    let mut end = 0u64;
    for t in tensors {
        string(&mut h, &t.name);
        h.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
        for d in &t.ne {
            h.extend_from_slice(&d.to_le_bytes());
        }
        h.extend_from_slice(&t.ty.id().to_le_bytes());
        h.extend_from_slice(&end.to_le_bytes());
        relative.push(end);
        end = (end + t.bytes()).next_multiple_of(ALIGN);
    }
    let start = (h.len() as u64).next_multiple_of(ALIGN);
    h.resize(start as usize, 0);
    let file = File::create(path).map_err(err(path.display()))?;
    let mut w = BufWriter::with_capacity(8 * MIB as usize, &file);
    w.write_all(&h).map_err(err(path.display()))?;
    if let Fill::Random(seed) = fill {
        let mut rng = Xorshift(seed);
        let mut data = Vec::new();
        for (t, at) in tensors.iter().zip(&relative) {
            data.resize(t.bytes() as usize, 0);
            random_tensor(t.ty, &mut data, &mut rng);
            let pad = (at + t.bytes()).next_multiple_of(ALIGN) - (at + t.bytes());
            w.write_all(&data).map_err(err(path.display()))?;
            w.write_all(&[0; ALIGN as usize][..pad as usize])
                .map_err(err(path.display()))?;
        }
    }
    w.flush().map_err(err(path.display()))?;
    drop(w);
    file.set_len(start + end).map_err(err(path.display()))?;
    if let Fill::Random(_) = fill {
        file.sync_all().map_err(err(path.display()))?;
    }
    Ok(relative.into_iter().map(|r| start + r).collect())
}

/// Random data for a tensor of type `ty`: the values of an F32 tensor and the float16 scale of
/// every Q8_0 block random in [-1, 1], so that they are finite; the K-quants' bytes as they come
/// (only read raw).
fn random_tensor(ty: GgmlType, data: &mut [u8], rng: &mut Xorshift) {
    for c in data.chunks_mut(8) {
        c.copy_from_slice(&rng.next().to_le_bytes()[..c.len()]);
    }
    match ty {
        GgmlType::F32 => {
            for v in data.chunks_exact_mut(4) {
                let x = (rng.next() >> 40) as f32 / (1 << 23) as f32 - 1.0;
                v.copy_from_slice(&x.to_le_bytes());
            }
        }
        GgmlType::Q8_0 => {
            for block in data.chunks_exact_mut(34) {
                // A sign and a magnitude of at most 0x3c00, float16's 1.0.
                let r = rng.next();
                let scale = (r as u16 & 0x8000) | ((r >> 16) % 0x3c01) as u16;
                block[..2].copy_from_slice(&scale.to_le_bytes());
            }
        }
        _ => {}
    }
}
