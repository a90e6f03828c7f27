//! Checks of the guest memory map the frontend sends (SET_MEM_TABLE, ADD_MEM_REG), before any
//! queue thread reads it.
//!
//! vhost-user-backend maps each region of the frontend's table from the fd that comes with it
//! (`MAP_SHARED`, the size the frontend says) and vm-memory does not compare that size with the
//! file's: a region that reaches past the end of its file maps, and the first read of a page
//! beyond the end (a ring or a buffer placed there) kills the daemon with SIGBUS. So each
//! region backed by a regular file (memfd, hugetlbfs, a file on tmpfs) must lie within it.
//! What stays out of reach: a frontend that shrinks the file after sending it (QEMU seals its
//! memfds against that by default, `seal=on`; a file backend has no seals) makes any
//! vhost-user daemon take SIGBUS; the frontend is trusted that far, as it owns the guest's
//! memory.

use std::io;

use vm_memory::{GuestAddressSpace, GuestMemory as _, GuestMemoryAtomic, GuestMemoryRegion};

use super::GuestMemory;

/// The map the handler installed in `mem` (its own view, which the vrings share), for the
/// queue threads: as a map of their own once checked; refused, it is also taken back out of
/// the handler's view.
pub(super) fn checked(
    mem: &GuestMemoryAtomic<GuestMemory>,
) -> io::Result<GuestMemoryAtomic<GuestMemory>> {
    let map = mem.memory().into_inner();
    if let Err(e) = check_regions(&map) {
        if let Ok(handler_map) = mem.lock() {
            handler_map.replace(GuestMemory::new());
        }
        return Err(e);
    }
    Ok(GuestMemoryAtomic::from(map))
}

/// `Err` (one line) when a region of `mem` reaches past the end of the regular file it maps.
pub(super) fn check_regions(mem: &GuestMemory) -> io::Result<()> {
    for region in mem.iter() {
        let Some(file) = region.file_offset() else {
            continue;
        };
        let meta = file.file().metadata()?;
        let end = file.start().checked_add(region.len());
        if meta.file_type().is_file() && end.map_or(true, |end| end > meta.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "guest memory region at {:#x} ({} bytes at offset {} of its file) reaches \
                     past the end of the file ({} bytes)",
                    region.start_addr().0,
                    region.len(),
                    file.start(),
                    meta.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use vm_memory::{FileOffset, GuestAddress, GuestRegionMmap, MmapRegion};

    fn mapped(file_len: u64, offset: u64, size: usize) -> GuestMemory {
        let file: File = tempfile_in_tmp();
        file.set_len(file_len).unwrap();
        let region = MmapRegion::from_file(FileOffset::new(file, offset), size).unwrap();
        GuestMemory::from_regions(vec![GuestRegionMmap::new(region, GuestAddress(0)).unwrap()])
            .unwrap()
    }

    fn tempfile_in_tmp() -> File {
        let path = std::env::temp_dir().join(format!("vhostfs-mem-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    #[test]
    fn a_region_must_lie_within_its_file() {
        assert!(check_regions(&mapped(1 << 20, 0, 1 << 20)).is_ok());
        assert!(check_regions(&mapped(1 << 20, 4096, (1 << 20) - 4096)).is_ok());
        let e = check_regions(&mapped(4096, 0, 1 << 20)).unwrap_err();
        assert!(
            e.to_string()
                .contains("past the end of the file (4096 bytes)"),
            "{e}"
        );
        assert!(check_regions(&mapped(1 << 20, 4096, 1 << 20)).is_err());
    }
}
