//! A VFS in front of SQLite's own that hands a commit's WAL frames to the
//! kernel in one write instead of two per page.
//!
//! SQLite writes each WAL frame as two `pwrite` calls (its 24-byte header,
//! then the page): 32 system calls for a group commit of 16 pages, 10 % of
//! the writer thread under load (BENCHMARKS.md, session 10). This VFS keeps
//! appends to a WAL file in memory while they are contiguous and writes them
//! at once before any other call on the file reaches SQLite's own VFS: before
//! the sync that ends every commit at `synchronous=FULL`, a read, a size, a
//! truncation or a close. Only write connections at `FULL` use it
//! (`store::open_write_connection`): their frames reach the file before the
//! commit is synced and before other connections can see it. At `NORMAL` a
//! commit publishes its frames without a sync, which this VFS would not see.
//!
//! Every other file, and every other call, goes to SQLite's default VFS as it
//! is.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name connections open this VFS by.
pub const NAME: &CStr = c"postern-wal";

/// Bytes kept before they are written anyway: SQLite's unix VFS writes at
/// most this many in one call (it masks larger sizes to their low 17 bits).
/// A group commit's frames (about 16 pages of 4 KiB) fit; a larger
/// transaction writes runs of up to this size.
const MAX_BUFFERED: usize = 0x1_ffff;

/// SQLite's default VFS, which every call is handed to.
static BASE: OnceLock<Vfs> = OnceLock::new();

struct Vfs(*mut ffi::sqlite3_vfs);

// SAFETY: SQLite's default VFS object lives as long as the process and is
// made for use from any thread; the pointer is set once and only read.
unsafe impl Send for Vfs {}
// SAFETY: as for Send.
unsafe impl Sync for Vfs {}

/// Writes to the kernel that the buffer saved (appends taken in memory minus
/// the runs written), for tests and diagnostics.
static WRITES_SAVED: AtomicU64 = AtomicU64::new(0);

/// The writes this VFS did not make on its own, for tests.
pub fn writes_saved() -> u64 {
    WRITES_SAVED.load(Ordering::Relaxed)
}

/// Registers the VFS (not as the default). Returns false when it was
/// already registered or SQLite has no default VFS.
///
/// # Safety
/// Must be called before any other thread uses SQLite.
pub unsafe fn install() -> bool {
    if BASE.get().is_some() {
        return false;
    }
    // SAFETY: the caller guarantees that nothing else uses SQLite meanwhile.
    let base = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
    if base.is_null() {
        return false;
    }
    // SQLite's unix VFS reads nothing from the VFS object it is called with
    // but `pAppData` and `mxPathname`, which the copy keeps: every method
    // but `xOpen` can be SQLite's own.
    // SAFETY: `base` is SQLite's registered default VFS.
    let mut vfs = unsafe { *base };
    vfs.szOsFile = c_int::try_from(std::mem::size_of::<File>()).unwrap_or(c_int::MAX).saturating_add(vfs.szOsFile);
    vfs.zName = NAME.as_ptr();
    vfs.pNext = std::ptr::null_mut();
    vfs.xOpen = Some(open);
    if BASE.set(Vfs(base)).is_err() {
        return false;
    }
    // Registered once for the life of the process: leaked on purpose.
    let vfs = Box::leak(Box::new(vfs));
    // SAFETY: a complete VFS object that lives for the rest of the process.
    unsafe { ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK }
}

/// Whether write connections can open with this VFS.
pub fn installed() -> bool {
    BASE.get().is_some()
}

/// What SQLite holds for an open file: this header, then the base VFS's own
/// file object in the same allocation (`szOsFile` makes room for both).
#[repr(C)]
struct File {
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    /// A WAL file: contiguous appends are kept in `pending`.
    buffered: bool,
    pending: Pending,
}

/// Bytes taken from contiguous writes, to be written at `offset`.
struct Pending {
    offset: i64,
    bytes: Vec<u8>,
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Vfs(base)) = BASE.get() else {
        return ffi::SQLITE_ERROR;
    };
    let f = file.cast::<File>();
    // SAFETY: SQLite gives `szOsFile` bytes, aligned for any object: this
    // header, then room for the base VFS's file right after it.
    unsafe {
        let inner = file.cast::<u8>().add(std::mem::size_of::<File>()).cast::<ffi::sqlite3_file>();
        let Some(base_open) = (**base).xOpen else {
            (*file).pMethods = std::ptr::null();
            return ffi::SQLITE_ERROR;
        };
        let rc = base_open(*base, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK || (*inner).pMethods.is_null() {
            // SQLite closes nothing whose `pMethods` is null.
            (*file).pMethods = std::ptr::null();
            if !(*inner).pMethods.is_null() {
                if let Some(close) = (*(*inner).pMethods).xClose {
                    close(inner);
                }
            }
            return if rc == ffi::SQLITE_OK { ffi::SQLITE_CANTOPEN } else { rc };
        }
        std::ptr::write(
            f,
            File {
                base: ffi::sqlite3_file { pMethods: &METHODS },
                inner,
                buffered: flags & ffi::SQLITE_OPEN_WAL != 0,
                pending: Pending { offset: 0, bytes: Vec::new() },
            },
        );
    }
    ffi::SQLITE_OK
}

/// The file behind SQLite's handle, and the base VFS's methods for it.
///
/// # Safety
/// `file` must be a handle this VFS opened and not yet closed.
unsafe fn parts<'a>(file: *mut ffi::sqlite3_file) -> (&'a mut File, &'a ffi::sqlite3_io_methods) {
    // SAFETY: per the contract, `file` is a live `File` whose inner file
    // was opened by the base VFS, so its methods are set.
    unsafe {
        let f = &mut *file.cast::<File>();
        let methods = &*(*f.inner).pMethods;
        (f, methods)
    }
}

impl File {
    /// Writes what is pending; on failure it stays pending, for the next call.
    fn flush(&mut self, methods: &ffi::sqlite3_io_methods) -> c_int {
        if self.pending.bytes.is_empty() {
            return ffi::SQLITE_OK;
        }
        let Some(base_write) = methods.xWrite else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let len = c_int::try_from(self.pending.bytes.len()).unwrap_or(c_int::MAX);
        // SAFETY: a `File` exists from a successful open to its close, so
        // `inner` is open; the bytes are ours and outlive the call.
        let rc = unsafe { base_write(self.inner, self.pending.bytes.as_ptr().cast(), len, self.pending.offset) };
        if rc == ffi::SQLITE_OK {
            self.pending.bytes.clear();
        }
        rc
    }
}

unsafe extern "C" fn write(file: *mut ffi::sqlite3_file, data: *const c_void, amount: c_int, offset: i64) -> c_int {
    // SAFETY: SQLite calls with a handle this VFS opened.
    let (f, methods) = unsafe { parts(file) };
    let len = usize::try_from(amount).unwrap_or(0);
    if f.buffered && len < MAX_BUFFERED {
        let p = &mut f.pending;
        let follows = !p.bytes.is_empty() && offset == p.offset + p.bytes.len() as i64;
        if !follows || p.bytes.len() + len > MAX_BUFFERED {
            let rc = f.flush(methods);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            f.pending.offset = offset;
        } else {
            WRITES_SAVED.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: SQLite passes `amount` readable bytes at `data`.
        f.pending.bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) });
        return ffi::SQLITE_OK;
    }
    let rc = f.flush(methods);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match methods.xWrite {
        // SAFETY: the base VFS's own method on its own file, with SQLite's arguments.
        Some(w) => unsafe { w(f.inner, data, amount, offset) },
        None => ffi::SQLITE_IOERR_WRITE,
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite calls with a handle this VFS opened, and never again after.
    unsafe {
        let (f, methods) = parts(file);
        let flushed = f.flush(methods);
        let closed = methods.xClose.map_or(ffi::SQLITE_OK, |c| c(f.inner));
        std::ptr::drop_in_place(file.cast::<File>());
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            closed
        }
    }
}

/// Defines a method that writes what is pending, then calls the base VFS's
/// method of the same name with the same arguments.
macro_rules! after_flush {
    ($name:ident, $method:ident, $missing:expr, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: SQLite calls with a handle this VFS opened.
            unsafe {
                let (f, methods) = parts(file);
                let rc = f.flush(methods);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                match methods.$method {
                    Some(m) => m(f.inner $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

/// Defines a method that calls the base VFS's method as it is: these never
/// touch a WAL file's contents.
macro_rules! passed_on {
    ($name:ident, $method:ident, $missing:expr, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: SQLite calls with a handle this VFS opened.
            unsafe {
                let (f, methods) = parts(file);
                match methods.$method {
                    Some(m) => m(f.inner $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

after_flush!(read, xRead, ffi::SQLITE_IOERR_READ, (data: *mut c_void, amount: c_int, offset: i64));
after_flush!(truncate, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, (size: i64));
after_flush!(sync, xSync, ffi::SQLITE_IOERR_FSYNC, (flags: c_int));
after_flush!(file_size, xFileSize, ffi::SQLITE_IOERR_FSTAT, (size: *mut i64));
after_flush!(file_control, xFileControl, ffi::SQLITE_NOTFOUND, (op: c_int, arg: *mut c_void));
passed_on!(lock, xLock, ffi::SQLITE_OK, (level: c_int));
passed_on!(unlock, xUnlock, ffi::SQLITE_OK, (level: c_int));
passed_on!(check_reserved_lock, xCheckReservedLock, ffi::SQLITE_OK, (out: *mut c_int));
passed_on!(sector_size, xSectorSize, 4096, ());
passed_on!(device_characteristics, xDeviceCharacteristics, 0, ());
passed_on!(shm_lock, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, (offset: c_int, n: c_int, flags: c_int));
passed_on!(shm_unmap, xShmUnmap, ffi::SQLITE_OK, (delete: c_int));
passed_on!(unfetch, xUnfetch, ffi::SQLITE_OK, (offset: i64, page: *mut c_void));

unsafe extern "C" fn shm_map(file: *mut ffi::sqlite3_file, region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int {
    // SAFETY: SQLite calls with a handle this VFS opened.
    unsafe {
        let (f, methods) = parts(file);
        match methods.xShmMap {
            Some(m) if methods.iVersion >= 2 => m(f.inner, region, size, extend, out),
            _ => ffi::SQLITE_IOERR_SHMMAP,
        }
    }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite calls with a handle this VFS opened.
    unsafe {
        let (f, methods) = parts(file);
        if let Some(m) = methods.xShmBarrier.filter(|_| methods.iVersion >= 2) {
            m(f.inner);
        }
    }
}

unsafe extern "C" fn fetch(file: *mut ffi::sqlite3_file, offset: i64, amount: c_int, out: *mut *mut c_void) -> c_int {
    // SAFETY: SQLite calls with a handle this VFS opened; a null page tells
    // it to read the page instead.
    unsafe {
        let (f, methods) = parts(file);
        match methods.xFetch {
            Some(m) if methods.iVersion >= 3 => m(f.inner, offset, amount, out),
            _ => {
                *out = std::ptr::null_mut();
                ffi::SQLITE_OK
            }
        }
    }
}
