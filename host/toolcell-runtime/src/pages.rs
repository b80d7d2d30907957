//! Giving back the pages of the binary's embedded components once they are read: the built-in
//! tools' compiled forms and wasm are 41 MB of its read-only data, read once at load (to be
//! deserialized, and hashed), and would otherwise stay resident for the life of the process.

use std::os::unix::fs::FileExt as _;

/// Drop this process's mapping of the whole pages of `bytes`, if they are pages of a file that
/// were never copied (the binary's read-only data): they stay in the page cache for the next
/// process and for this one's next read, and leave its resident set. Anything else (memory of
/// the heap, say, whose contents dropping would lose) is left as it is.
pub(super) fn release_pages(bytes: &'static [u8]) {
    let page = rustix::param::page_size();
    let start = bytes.as_ptr() as usize;
    let (first, end) = (start.next_multiple_of(page), (start + bytes.len()) / page * page);
    if end <= first || !file_pages(first, end, page) {
        return;
    }
    // SAFETY: every page in the range lies within `bytes` and is a page of a file, never
    // copied (checked just above; the data is immutable, so none can be copied since):
    // dropping it from this process's page tables loses nothing, and the next read maps the
    // same page of the file again.
    #[expect(unsafe_code, reason = "madvise takes a raw address range")]
    let _ = unsafe { rustix::mm::madvise(first as *mut std::ffi::c_void, end - first, rustix::mm::Advice::LinuxDontNeed) };
}

/// Whether every page in `first..end` is, as `/proc/self/pagemap` tells, either not present or
/// a page of a file (not an anonymous copy), and none is swapped out. Unreadable: `false`.
fn file_pages(first: usize, end: usize, page: usize) -> bool {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE: u64 = 1 << 61;
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return false;
    };
    let mut entries = vec![0u8; (end - first) / page * 8];
    if pagemap.read_exact_at(&mut entries, (first / page * 8) as u64).is_err() {
        return false;
    }
    entries.chunks_exact(8).all(|entry| {
        <[u8; 8]>::try_from(entry)
            .map(u64::from_le_bytes)
            .is_ok_and(|flags| flags & SWAPPED == 0 && (flags & PRESENT == 0 || flags & FILE != 0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the page at `address` is mapped in this process.
    fn present(address: usize) -> bool {
        let page = rustix::param::page_size();
        let pagemap = std::fs::File::open("/proc/self/pagemap").expect("pagemap");
        let mut entry = [0u8; 8];
        pagemap.read_exact_at(&mut entry, (address / page * 8) as u64).expect("read pagemap");
        u64::from_le_bytes(entry) & (1 << 63) != 0
    }

    static FROM_THE_BINARY: [u8; 5 * 4096] = [7; 5 * 4096];

    #[test]
    fn pages_of_the_binary_leave_the_process_and_read_back_the_same() {
        let bytes: &'static [u8] = std::hint::black_box(&FROM_THE_BINARY);
        assert_eq!(bytes.iter().map(|byte| u64::from(*byte)).sum::<u64>(), 7 * 5 * 4096);
        let inside = (bytes.as_ptr() as usize).next_multiple_of(rustix::param::page_size());
        assert!(present(inside));
        release_pages(bytes);
        assert!(!present(inside), "a page of the binary's data was given back");
        assert!(bytes.iter().all(|byte| *byte == 7), "and reads back the same");
    }

    #[test]
    fn memory_of_the_heap_is_left_as_it_is() {
        let bytes: &'static [u8] = Vec::leak(vec![9u8; 5 * 4096]);
        let inside = (bytes.as_ptr() as usize).next_multiple_of(rustix::param::page_size());
        release_pages(bytes);
        assert!(present(inside), "an anonymous page stays");
        assert!(bytes.iter().all(|byte| *byte == 9), "with its contents");
    }
}
