//! Loading a hostile archive allocates memory in proportion to its size, not to the work its
//! pickle asks for. A counting global allocator measures it; this file holds a single test so
//! no other test's allocations are counted.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Cursor, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::ec2;

/// Counts every byte allocated (cumulative: a realloc counts its new size).
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The published XGBoost archive with `scaler.pkl` replaced by `pickle`, deflated.
fn with_scaler(pickle: &[u8]) -> Vec<u8> {
    let published = std::fs::read(ec2("BPFOnly/XgboostFitTrainer_0.zip")).expect("archive");
    let mut src = zip::ZipArchive::new(Cursor::new(published)).expect("zip");
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..src.len() {
        let mut f = src.by_index(i).expect("member");
        let name = f.name().to_string();
        let mut content = Vec::new();
        f.read_to_end(&mut content).expect("read");
        out.start_file(name.as_str(), opts).expect("start");
        out.write_all(if name == "scaler.pkl" {
            pickle
        } else {
            &content
        })
        .expect("write");
    }
    out.finish().expect("finish").into_inner()
}

#[test]
fn reused_memoised_string_does_not_multiply_memory() {
    // A 1 MiB string, memoised, then `h0 h0 STACK_GLOBAL POP` 2000 times. When a class
    // reference copied its strings, each round allocated 2 MiB (4 GB in all); the archive is
    // a few hundred KB.
    let big = 1usize << 20;
    let mut p = vec![0x80, 4, b'X'];
    p.extend_from_slice(&u32::try_from(big).expect("fits").to_le_bytes());
    p.extend(std::iter::repeat_n(b'a', big));
    p.extend_from_slice(b"\x940");
    for _ in 0..2000 {
        p.extend_from_slice(b"h\x00h\x00\x930");
    }
    p.extend_from_slice(b"N.");
    let archive = with_scaler(&p);
    assert!(archive.len() < 1 << 20, "{} bytes", archive.len());

    let before = ALLOCATED.load(Ordering::Relaxed);
    let r = kepler_models::load_model_bytes(&archive, None, None);
    let used = ALLOCATED.load(Ordering::Relaxed) - before;
    // The pickle's root is None, not a scaler: an error, after the whole pickle was read.
    assert!(r.is_err());
    // Decompressing the members (~1.6 MB) and parsing them, with Vec growth, stays within a
    // small multiple of that; 2000 copies of 2 MiB would not.
    assert!(used < 64 << 20, "{used} bytes allocated");
}
