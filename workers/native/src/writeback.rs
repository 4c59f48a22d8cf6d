//! Writeback started as an output file completes. Every file the core writes is made durable
//! (fsync) before it is published (`DataDir` on the Python side); started here, the kernel
//! writes it out while other work runs, and that fsync finds little left to wait for.

use std::fs::File;

/// Starts writing `file`'s dirty pages out without waiting for them. Advisory: a failure
/// here surfaces at the fsync before publication.
pub fn start(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // Safety: a valid open descriptor; offset 0 and length 0 cover the whole file.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}
