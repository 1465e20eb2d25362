//! The read path with a tensor decoded on read: a unit-test codec (chunks compressed with zlib, as
//! an HDF5 or npz reader will describe them) read through [`Reading::send`].

use std::borrow::Cow;
use std::io::{IoSliceMut, Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::file::Source;
use super::gather::Stored;
use super::read::{Body, Piece, Reading, Wait};
use super::sources::Sources;
use crate::base::clock::Clock;
use crate::base::testing::TempDir;
use crate::format::{ChunkAt, Computed, Dtype, ReadAt, Tensor};

/// Bytes each chunk decodes to.
const CHUNK: usize = 4096;

/// A tensor stored as zlib streams, one per [`CHUNK`] of its bytes (`chunks`: where each is and
/// how long), counting how many times it inflates one.
#[derive(Debug)]
struct Zlib {
    chunks: Vec<(u64, u64)>,
    size: u64,
    inflated: AtomicUsize,
}

impl Computed for Zlib {
    fn read(&self, read: &mut ReadAt<'_>, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < out.len() {
            let at = offset + done as u64;
            let (k, within) = ((at / CHUNK as u64) as usize, (at % CHUNK as u64) as usize);
            let (stored_at, len) = self.chunks[k];
            let chunk = read.decoded(
                ChunkAt {
                    file: None,
                    at: stored_at,
                },
                &mut |r| {
                    let mut stored = vec![0; len as usize];
                    r.read_at(None, &mut [IoSliceMut::new(&mut stored)], stored_at)?;
                    self.inflated.fetch_add(1, Ordering::SeqCst);
                    let mut plain = Vec::new();
                    flate2::read::ZlibDecoder::new(&stored[..]).read_to_end(&mut plain)?;
                    Ok(plain)
                },
            )?;
            let n = (chunk.len() - within).min(out.len() - done);
            out[done..done + n].copy_from_slice(&chunk[within..within + n]);
            done += n;
        }
        Ok(())
    }

    fn decodes(&self) -> bool {
        true
    }
}

/// Writes `plain` as zlib chunks to `path`: the codec that reads it back.
fn write(path: &Path, plain: &[u8]) -> Zlib {
    write_at(path, plain, flate2::Compression::fast())
}

/// [`write`] at a compression `level`.
fn write_at(path: &Path, plain: &[u8], level: flate2::Compression) -> Zlib {
    let (mut file, mut chunks) = (Vec::new(), Vec::new());
    for chunk in plain.chunks(CHUNK) {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), level);
        z.write_all(chunk).unwrap();
        let z = z.finish().unwrap();
        chunks.push((file.len() as u64, z.len() as u64));
        file.extend_from_slice(&z);
    }
    std::fs::write(path, &file).unwrap();
    Zlib {
        chunks,
        size: plain.len() as u64,
        inflated: AtomicUsize::new(0),
    }
}

/// The tensor `codec` computes, as the read path is given it.
fn tensor(codec: Arc<Zlib>) -> Arc<Tensor> {
    Arc::new(Tensor {
        name: Arc::from("z"),
        dtype: Dtype::U8,
        shape: Box::new([codec.size as usize]),
        begin: 0,
        end: codec.size,
        strides: None,
        computed: Some(codec),
        file: None,
    })
}

/// Bytes `[offset, offset + len)` of `tensor`, stored in `source`, read as a FUSE read is.
fn read(
    source: &Arc<Source>,
    tensor: &Arc<Tensor>,
    offset: u64,
    len: u64,
    wait: Wait,
) -> Option<Vec<u8>> {
    let reading = Reading {
        head: Cow::Borrowed(&[]),
        body: Some(Body {
            source: Cow::Borrowed(source),
            pieces: vec![Piece {
                start: 0,
                offset,
                len,
                widen: None,
                stored: Stored::Computed(tensor.clone(), Arc::from(Vec::new())),
                source: None,
            }],
        }),
    };
    let mut out = Vec::new();
    reading
        .send(wait, &mut |b: &[u8]| out.extend_from_slice(b))?
        .unwrap();
    Some(out)
}

fn plain(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i / 7) as u8 ^ seed).collect()
}

#[test]
fn a_sequential_read_of_a_decoded_tensor_inflates_each_chunk_once() {
    let dir = TempDir::new("decoded");
    let path = dir.join("t.z");
    let want = plain(10 * CHUNK + 123, 0);
    let codec = Arc::new(write(&path, &want));
    let sources = Sources::new(Clock::manual(), 64);
    let source = Arc::new(Source::open(&path, &sources).unwrap());
    source.track();
    let t = tensor(codec.clone());
    // Never on a FUSE thread, whatever the page cache holds.
    assert!(read(&source, &t, 0, 1000, Wait::No).is_none());
    // Reads of 1000 bytes, front to back, as the kernel sends a sequential reader's: each chunk
    // is inflated once though most reads fall across two of them.
    let mut got = Vec::new();
    for at in (0..want.len() as u64).step_by(1000) {
        let len = 1000.min(want.len() as u64 - at);
        got.extend(read(&source, &t, at, len, Wait::Yes).unwrap());
    }
    assert_eq!(got, want);
    assert_eq!(codec.inflated.load(Ordering::SeqCst), 11);
    // Read again: all from the cache.
    assert_eq!(
        read(&source, &t, 5000, 9000, Wait::Yes).unwrap(),
        &want[5000..14000]
    );
    assert_eq!(codec.inflated.load(Ordering::SeqCst), 11);
}

#[test]
fn a_replaced_file_never_serves_the_old_files_decoded_chunks() {
    let dir = TempDir::new("decoded-replaced");
    let path = dir.join("t.z");
    let sources = Sources::new(Clock::manual(), 64);
    // Stored deflate blocks: both files' chunks lie at the same places, so a cache keyed by the
    // place alone would serve the old bytes.
    let stored = flate2::Compression::none();
    let old = plain(3 * CHUNK, 0);
    let codec = Arc::new(write_at(&path, &old, stored));
    let old_chunks = codec.chunks.clone();
    let first = Arc::new(Source::open(&path, &sources).unwrap());
    first.track();
    assert_eq!(
        read(
            &first,
            &tensor(codec.clone()),
            0,
            old.len() as u64,
            Wait::Yes
        )
        .unwrap(),
        old
    );
    // Other bytes in a new file, its chunks where the old one's were.
    let new = plain(3 * CHUNK, 0x5a);
    std::fs::remove_file(&path).unwrap();
    let codec = Arc::new(write_at(&path, &new, stored));
    assert_eq!(codec.chunks, old_chunks);
    let second = Arc::new(Source::open(&path, &sources).unwrap());
    second.track();
    assert_eq!(
        read(
            &second,
            &tensor(codec.clone()),
            0,
            new.len() as u64,
            Wait::Yes
        )
        .unwrap(),
        new
    );
    assert_eq!(codec.inflated.load(Ordering::SeqCst), 3);
}

#[test]
fn without_a_cache_every_read_decodes_again() {
    let dir = TempDir::new("decoded-none");
    let path = dir.join("t.z");
    let want = plain(2 * CHUNK, 1);
    let codec = Arc::new(write(&path, &want));
    let sources = Sources::configured(
        Clock::manual(),
        64,
        &super::Config {
            decode_cache: 0,
            ..Default::default()
        },
    );
    let source = Arc::new(Source::open(&path, &sources).unwrap());
    source.track();
    let t = tensor(codec.clone());
    for _ in 0..3 {
        assert_eq!(
            read(&source, &t, 0, want.len() as u64, Wait::Yes).unwrap(),
            want
        );
    }
    assert_eq!(codec.inflated.load(Ordering::SeqCst), 6);
}
