//! Start-up code out of resident memory. Flag and config parsing, source selection, model
//! loading and the eBPF loader child's wiring run once; the kernel maps the binary's code in
//! 64 KiB fault-around blocks, so after start-up about 3 MiB of pages of the `kepler` binary
//! stay resident that the tick loop never touches again (measured with `bench/agent_rss.sh`,
//! see docs/benchmarks.md). Paging the binary's read-only mappings out once start-up is over
//! lets only the code that runs again come back.
//!
//! The pages are clean copies of the file, so this loses nothing; the kernel only pages out
//! file pages for a process that owns the file or may write it (else the call does nothing),
//! and kernels before 5.4 refuse the advice, which is then only logged.

use std::os::unix::fs::MetadataExt;

/// The address ranges of this process's mappings of its own executable that are not writable
/// (code, read-only data, unwinding tables), from `/proc/self/maps` text.
pub fn read_only_ranges(maps: &str, exe_inode: u64) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms) = (fields.next()?, fields.next()?);
            let inode: u64 = fields.nth(2)?.parse().ok()?;
            if inode != exe_inode || perms.as_bytes().get(1) != Some(&b'-') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

/// Advises the kernel to page out the executable's read-only mappings; returns the bytes
/// advised. Failures are logged, never fatal.
pub fn release() -> usize {
    let inode = match std::fs::metadata("/proc/self/exe") {
        Ok(m) => m.ino(),
        Err(e) => {
            tracing::debug!(error = %e, "start-up code stays resident: no /proc/self/exe");
            return 0;
        }
    };
    let maps = match std::fs::read_to_string("/proc/self/maps") {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(error = %e, "start-up code stays resident: no /proc/self/maps");
            return 0;
        }
    };
    let mut advised = 0;
    for (start, end) in read_only_ranges(&maps, inode) {
        // SAFETY: the range is a whole mapping of this process; paging out clean file pages
        // changes no memory contents, they are read back from the file on the next access.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            tracing::debug!(error = %e, "start-up code stays resident");
            return advised;
        }
        advised += end - start;
    }
    advised
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_executables_read_only_mappings() {
        let maps = "\
55b254270000-55b254581000 r--p 00000000 fe:01 4242 /usr/bin/kepler
55b254581000-55b254f2d000 r-xp 00310000 fe:01 4242 /usr/bin/kepler
55b254fb7000-55b254fc0000 rw-p 00d46000 fe:01 4242 /usr/bin/kepler
7f00000000-7f00001000 r-xp 00000000 fe:01 99 /usr/lib/libc.so.6
7f00002000-7f00003000 r--p 00000000 00:00 0
garbage line
";
        assert_eq!(
            read_only_ranges(maps, 4242),
            [
                (0x55b254270000, 0x55b254581000),
                (0x55b254581000, 0x55b254f2d000)
            ]
        );
        assert!(read_only_ranges(maps, 7).is_empty());
    }

    #[test]
    fn this_test_binary_has_read_only_mappings_and_survives_paging_them_out() {
        let inode = std::fs::metadata("/proc/self/exe").unwrap().ino();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let ranges = read_only_ranges(&maps, inode);
        assert!(ranges.iter().any(|r| r.1 - r.0 > 4096), "{maps}");
        let file_kib = || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let before = file_kib();
        // Code paged out runs again: this test keeps executing after it.
        let advised = release();
        let after = file_kib();
        println!("advised {advised} bytes; RssFile {before} -> {after} KiB");
        // Refused (an old kernel) or done, for all of them.
        assert!(advised == 0 || advised == ranges.iter().map(|r| r.1 - r.0).sum::<usize>());
        if advised > 0 {
            assert!(after < before, "RssFile {before} -> {after} KiB");
        }
    }
}
