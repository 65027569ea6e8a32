//! A PMIx client (cargo feature `pmix`, the system's libpmix), used to read
//! the job (rank, size, ranks on this node) under a launcher that sets only
//! `PMIX_*` variables (`prterun`; see [`JobInfo`](crate::job::JobInfo)),
//! and to hand rank 0's rendezvous address and the job key to every rank,
//! as [`pmi2`](crate::bootstrap::pmi2) does under `srun --mpi=pmi2`: rank 0
//! `PMIx_Put`s them, every rank `PMIx_Commit`s and `PMIx_Fence`s with
//! data collection, the others `PMIx_Get` them from rank 0. This is what
//! Open MPI's `mpirun` (4.x with PMIx, 5.x), PRRTE's `prterun` and
//! `srun --mpi=pmix` serve their processes.
//!
//! The binding is a small hand-written `extern "C"` block for the calls
//! and structs used here, its layouts checked at compile time against the
//! sizes and offsets of PMIx 4.2's headers (`pmix_common.h`: they have been
//! stable since PMIx 2, whose ABI later versions keep). What the library
//! hands back is treated as hostile input: the type is checked, strings are
//! length-bounded ([`MAX_VALUE`]) and must be UTF-8, and nothing panics.

use crate::{Error, Result};
use std::ffi::{c_char, c_int, CString};
use std::time::Duration;

/// Largest string accepted from PMIx (an address and a key are ~100 bytes).
pub const MAX_VALUE: usize = 4096;

/// The C types and calls of `pmix.h` / `pmix_common.h` used here.
#[allow(non_camel_case_types, missing_docs)]
pub mod ffi {
    use std::ffi::{c_char, c_int, c_void};
    use std::mem::{align_of, offset_of, size_of};

    /// `PMIX_MAX_NSLEN + 1`.
    pub const NSPACE_LEN: usize = 256;
    /// `PMIX_MAX_KEYLEN + 1`.
    pub const KEY_LEN: usize = 512;

    pub type pmix_status_t = c_int;
    pub type pmix_rank_t = u32;
    pub type pmix_data_type_t = u16;
    pub type pmix_scope_t = u8;

    pub const PMIX_SUCCESS: pmix_status_t = 0;
    pub const PMIX_BOOL: pmix_data_type_t = 1;
    pub const PMIX_STRING: pmix_data_type_t = 3;
    pub const PMIX_INT: pmix_data_type_t = 6;
    pub const PMIX_UINT16: pmix_data_type_t = 13;
    pub const PMIX_UINT32: pmix_data_type_t = 14;
    pub const PMIX_GLOBAL: pmix_scope_t = 3;
    pub const PMIX_RANK_WILDCARD: pmix_rank_t = u32::MAX - 1;
    /// `PMIX_COLLECT_DATA` (bool).
    pub const KEY_COLLECT_DATA: &str = "pmix.collect";
    /// `PMIX_TIMEOUT` (int, seconds).
    pub const KEY_TIMEOUT: &str = "pmix.timeout";
    /// `PMIX_JOB_SIZE` (uint32).
    pub const KEY_JOB_SIZE: &str = "pmix.job.size";
    /// `PMIX_LOCAL_SIZE` (uint32; of the namespace on this node).
    pub const KEY_LOCAL_SIZE: &str = "pmix.local.size";
    /// `PMIX_LOCAL_RANK` (uint16; of a process).
    pub const KEY_LOCAL_RANK: &str = "pmix.lrank";

    /// `pmix_proc_t`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct pmix_proc_t {
        pub nspace: [c_char; NSPACE_LEN],
        pub rank: pmix_rank_t,
    }

    /// `pmix_byte_object_t`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct pmix_byte_object_t {
        pub bytes: *mut c_char,
        pub size: usize,
    }

    /// The members of `pmix_value_t`'s union used here; `_envar` gives it
    /// the size of the largest member (`pmix_envar_t`: two pointers and a
    /// char).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub union pmix_value_data {
        pub flag: bool,
        pub string: *mut c_char,
        pub integer: c_int,
        pub uint16: u16,
        pub uint32: u32,
        pub bo: pmix_byte_object_t,
        pub ptr: *mut c_void,
        pub _envar: [u64; 3],
    }

    /// `pmix_value_t`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct pmix_value_t {
        pub type_: pmix_data_type_t,
        pub data: pmix_value_data,
    }

    /// `pmix_info_t`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct pmix_info_t {
        pub key: [c_char; KEY_LEN],
        pub flags: u32,
        pub value: pmix_value_t,
    }

    // The layouts of PMIx 4.2.2's headers on x86_64 / aarch64 (measured
    // with sizeof / offsetof against /usr/lib/x86_64-linux-gnu/pmix2/include).
    const _: () = assert!(size_of::<pmix_proc_t>() == 260 && align_of::<pmix_proc_t>() == 4);
    const _: () = assert!(offset_of!(pmix_proc_t, rank) == 256);
    const _: () = assert!(size_of::<pmix_byte_object_t>() == 16);
    const _: () = assert!(offset_of!(pmix_byte_object_t, size) == 8);
    const _: () = assert!(size_of::<pmix_value_t>() == 32 && align_of::<pmix_value_t>() == 8);
    const _: () = assert!(offset_of!(pmix_value_t, data) == 8);
    const _: () = assert!(size_of::<pmix_info_t>() == 552 && align_of::<pmix_info_t>() == 8);
    const _: () = assert!(offset_of!(pmix_info_t, flags) == 512);
    const _: () = assert!(offset_of!(pmix_info_t, value) == 520);

    #[link(name = "pmix")]
    extern "C" {
        pub fn PMIx_Init(
            proc_: *mut pmix_proc_t,
            info: *mut pmix_info_t,
            ninfo: usize,
        ) -> pmix_status_t;
        pub fn PMIx_Finalize(info: *const pmix_info_t, ninfo: usize) -> pmix_status_t;
        pub fn PMIx_Put(
            scope: pmix_scope_t,
            key: *const c_char,
            val: *mut pmix_value_t,
        ) -> pmix_status_t;
        pub fn PMIx_Commit() -> pmix_status_t;
        pub fn PMIx_Fence(
            procs: *const pmix_proc_t,
            nprocs: usize,
            info: *const pmix_info_t,
            ninfo: usize,
        ) -> pmix_status_t;
        pub fn PMIx_Get(
            proc_: *const pmix_proc_t,
            key: *const c_char,
            info: *const pmix_info_t,
            ninfo: usize,
            val: *mut *mut pmix_value_t,
        ) -> pmix_status_t;
        pub fn PMIx_Error_string(status: pmix_status_t) -> *const c_char;
        pub fn PMIx_Value_destruct(val: *mut pmix_value_t);
    }
}

use ffi::*;

/// `PMIx_Error_string(status)`, bounded, or the number if the library
/// gives nothing readable.
fn status_string(status: pmix_status_t) -> String {
    // SAFETY: PMIx_Error_string takes any status and returns a pointer to
    // a static string (or NULL), never freed by the caller.
    let p = unsafe { PMIx_Error_string(status) };
    // SAFETY: `p` is NULL or a NUL-terminated static string (see above);
    // bounded_str reads at most MAX_VALUE + 1 bytes of it.
    unsafe { bounded_str(p) }.unwrap_or_else(|_| format!("status {status}"))
}

fn check(call: &str, status: pmix_status_t) -> Result<()> {
    if status == PMIX_SUCCESS {
        return Ok(());
    }
    Err(Error::bootstrap(format!(
        "PMIx: {call} failed: {} (status {status})",
        status_string(status)
    )))
}

/// A NUL-terminated C string of at most [`MAX_VALUE`] bytes, as UTF-8.
///
/// # Safety
/// `p` is NULL or points to memory readable up to its first NUL byte or
/// `MAX_VALUE + 1` bytes, whichever comes first.
unsafe fn bounded_str(p: *const c_char) -> Result<String> {
    if p.is_null() {
        return Err(Error::bootstrap("PMIx: a NULL string"));
    }
    // SAFETY: the caller guarantees `p` is readable up to its NUL or
    // MAX_VALUE + 1 bytes; strnlen reads no further.
    let n = unsafe { libc::strnlen(p, MAX_VALUE + 1) };
    if n > MAX_VALUE {
        return Err(Error::bootstrap(format!(
            "PMIx: a string longer than {MAX_VALUE} bytes"
        )));
    }
    // SAFETY: the `n` bytes before the NUL are readable (strnlen found them).
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| Error::bootstrap("PMIx: a string that is not UTF-8"))
}

/// The string a `pmix_value_t` holds: it must be of type `PMIX_STRING`,
/// non-NULL, at most [`MAX_VALUE`] bytes and UTF-8.
///
/// # Safety
/// If `v.type_ == PMIX_STRING`, `v.data.string` is NULL or a string
/// readable up to its NUL or `MAX_VALUE + 1` bytes (what `PMIx_Get` returns).
pub unsafe fn decode_string(v: &pmix_value_t) -> Result<String> {
    if v.type_ != PMIX_STRING {
        return Err(Error::bootstrap(format!(
            "PMIx: a value of type {} where a string (type {PMIX_STRING}) was expected",
            v.type_
        )));
    }
    // SAFETY: the type says the union holds `string`.
    let p = unsafe { v.data.string };
    // SAFETY: the caller guarantees `p` is NULL or a bounded readable string.
    unsafe { bounded_str(p) }
}

/// The number a `pmix_value_t` of type `PMIX_UINT32` holds.
pub fn decode_u32(v: &pmix_value_t) -> Result<u32> {
    if v.type_ != PMIX_UINT32 {
        return Err(Error::bootstrap(format!(
            "PMIx: a value of type {} where a uint32 (type {PMIX_UINT32}) was expected",
            v.type_
        )));
    }
    // SAFETY: the type says the union holds `uint32`; any bits are a u32.
    Ok(unsafe { v.data.uint32 })
}

/// The number a `pmix_value_t` of type `PMIX_UINT16` holds.
pub fn decode_u16(v: &pmix_value_t) -> Result<u16> {
    if v.type_ != PMIX_UINT16 {
        return Err(Error::bootstrap(format!(
            "PMIx: a value of type {} where a uint16 (type {PMIX_UINT16}) was expected",
            v.type_
        )));
    }
    // SAFETY: the type says the union holds `uint16`; any bits are a u16.
    Ok(unsafe { v.data.uint16 })
}

/// A `pmix_info_t` with `key` (shorter than [`KEY_LEN`]) and `value`.
fn info(key: &str, value: pmix_value_t) -> pmix_info_t {
    let mut k = [0 as c_char; KEY_LEN];
    for (d, s) in k.iter_mut().zip(key.bytes().take(KEY_LEN - 1)) {
        *d = s as c_char;
    }
    pmix_info_t {
        key: k,
        flags: 0,
        value,
    }
}

fn timeout_info(timeout: Duration) -> pmix_info_t {
    // whole seconds, rounded up, at least 1 (0 means "no timeout")
    let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    let secs = c_int::try_from(secs.max(1)).unwrap_or(c_int::MAX);
    info(
        KEY_TIMEOUT,
        pmix_value_t {
            type_: PMIX_INT,
            data: pmix_value_data { integer: secs },
        },
    )
}

fn key_cstring(key: &str) -> Result<CString> {
    CString::new(key)
        .ok()
        .filter(|k| k.as_bytes().len() < KEY_LEN)
        .ok_or_else(|| Error::bootstrap(format!("PMIx: bad key {key:?}")))
}

/// A value `PMIx_Get` allocated, released (`PMIX_VALUE_RELEASE`) on drop.
struct Got(*mut pmix_value_t);

impl Drop for Got {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: PMIx_Get allocated this value (malloc) and handed it
            // to us; we destruct it once here.
            unsafe { PMIx_Value_destruct(self.0) };
            // SAFETY: PMIX_VALUE_RELEASE frees the struct with pmix_free,
            // which is free(3); nothing points to it any more.
            unsafe { libc::free(self.0.cast()) };
        }
    }
}

impl Got {
    /// The value (non-NULL: [`Pmix::get_raw`] checked).
    fn value(&self) -> &pmix_value_t {
        // SAFETY: a non-NULL pointer PMIx_Get returned to a value it
        // allocated, alive until this Got is dropped.
        unsafe { &*self.0 }
    }
}

/// The client [`Pmix::keep`] left for the next [`Pmix::init`].
static KEPT: parking_lot::Mutex<Option<Pmix>> = parking_lot::Mutex::new(None);

/// This process as a PMIx client; `PMIx_Finalize` on drop.
pub struct Pmix {
    me: pmix_proc_t,
    /// This process's rank as the process manager knows it.
    pub rank: usize,
    /// Ranks in this process's namespace (`PMIX_JOB_SIZE`).
    pub size: usize,
}

impl Pmix {
    /// This process's PMIx client: the one [`keep`](Pmix::keep) left, or
    /// a new one (`PMIx_Init`, then this process's rank and its job's
    /// size).
    pub fn init() -> Result<Pmix> {
        if let Some(p) = KEPT.lock().take() {
            return Ok(p);
        }
        Self::init_new()
    }

    /// Keep this client for the next [`init`](Pmix::init) of this process
    /// instead of finalizing it, so the job is read and the address
    /// exchanged on one connection. (With `PMIx_Finalize` and a second
    /// `PMIx_Init` in between, 2 of 3 runs of a 4-rank job under Open MPI
    /// 4.1 with PMIx 4.2.2 had a rank that never reached the bootstrap; on
    /// one connection 8 of 8 passed. The cause was not pinned down.)
    pub fn keep(self) {
        *KEPT.lock() = Some(self);
    }

    fn init_new() -> Result<Pmix> {
        // SAFETY: pmix_proc_t is plain bytes and an integer: all-zero is
        // a valid value.
        let mut me: pmix_proc_t = unsafe { std::mem::zeroed() };
        // SAFETY: `me` is a writable pmix_proc_t; no info is passed.
        check("PMIx_Init", unsafe {
            PMIx_Init(&mut me, std::ptr::null_mut(), 0)
        })?;
        let mut p = Pmix {
            me,
            rank: me.rank as usize,
            size: 0,
        };
        let mut all = me;
        all.rank = PMIX_RANK_WILDCARD;
        let size = p.get_raw(&all, KEY_JOB_SIZE, None)?;
        p.size = decode_u32(size.value())? as usize;
        Ok(p)
    }

    /// This process's rank among its namespace's ranks on this node, and
    /// their number (`PMIX_LOCAL_RANK`, `PMIX_LOCAL_SIZE`).
    pub fn local(&self) -> Result<(usize, usize)> {
        let lrank = self.get_raw(&self.me, KEY_LOCAL_RANK, None)?;
        let mut all = self.me;
        all.rank = PMIX_RANK_WILDCARD;
        let lsize = self.get_raw(&all, KEY_LOCAL_SIZE, None)?;
        Ok((
            usize::from(decode_u16(lrank.value())?),
            decode_u32(lsize.value())? as usize,
        ))
    }

    /// This process's namespace (the job's name), if it is UTF-8.
    pub fn namespace(&self) -> Result<String> {
        let bytes: Vec<u8> = self
            .me
            .nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8(bytes)
            .map_err(|_| Error::bootstrap("PMIx: a namespace that is not UTF-8"))
    }

    fn get_raw(&self, proc_: &pmix_proc_t, key: &str, timeout: Option<Duration>) -> Result<Got> {
        let k = key_cstring(key)?;
        let infos: Vec<pmix_info_t> = timeout.map(timeout_info).into_iter().collect();
        let mut out: *mut pmix_value_t = std::ptr::null_mut();
        // SAFETY: `proc_`, the NUL-terminated key and `infos` (len
        // entries) outlive the call; PMIx_Get writes one pointer to `out`.
        let status = unsafe { PMIx_Get(proc_, k.as_ptr(), infos.as_ptr(), infos.len(), &mut out) };
        let got = Got(out);
        check(&format!("PMIx_Get({key:?} of rank {})", proc_.rank), status)?;
        if got.0.is_null() {
            return Err(Error::bootstrap(format!(
                "PMIx: PMIx_Get({key:?}) succeeded without a value"
            )));
        }
        Ok(got)
    }

    /// `PMIx_Put(PMIX_GLOBAL, key, value)` (a string; PMIx copies it).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        let k = key_cstring(key)?;
        let v =
            CString::new(value).map_err(|_| Error::bootstrap("PMIx: a value with a NUL byte"))?;
        let mut val = pmix_value_t {
            type_: PMIX_STRING,
            data: pmix_value_data {
                string: v.as_ptr().cast_mut(),
            },
        };
        // SAFETY: key and value are NUL-terminated and outlive the call;
        // PMIx_Put copies the value and does not write through the string.
        check("PMIx_Put", unsafe {
            PMIx_Put(PMIX_GLOBAL, k.as_ptr(), &mut val)
        })
    }

    /// `PMIx_Commit`, then `PMIx_Fence` over the whole namespace with data
    /// collection, given at most `timeout` (`PMIX_TIMEOUT`).
    pub fn commit_and_fence(&mut self, timeout: Duration) -> Result<()> {
        // SAFETY: no arguments; PMIx is initialized (self exists).
        check("PMIx_Commit", unsafe { PMIx_Commit() })?;
        let mut all = self.me;
        all.rank = PMIX_RANK_WILDCARD;
        let infos = [
            info(
                KEY_COLLECT_DATA,
                pmix_value_t {
                    type_: PMIX_BOOL,
                    data: pmix_value_data { flag: true },
                },
            ),
            timeout_info(timeout),
        ];
        // SAFETY: one proc and two infos, all alive for the call and read
        // only; they hold no pointers.
        check("PMIx_Fence", unsafe {
            PMIx_Fence(&all, 1, infos.as_ptr(), infos.len())
        })
    }

    /// The string rank `rank` put under `key`, given at most `timeout`.
    pub fn get(&self, rank: usize, key: &str, timeout: Duration) -> Result<String> {
        let mut from = self.me;
        from.rank = u32::try_from(rank)
            .ok()
            .filter(|&r| r < PMIX_RANK_WILDCARD)
            .ok_or_else(|| Error::bootstrap(format!("PMIx: no rank {rank}")))?;
        let got = self.get_raw(&from, key, Some(timeout))?;
        // SAFETY: a value PMIx_Get returned: when its type is PMIX_STRING
        // its string is NULL or NUL-terminated.
        unsafe { decode_string(got.value()) }
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        // SAFETY: this process called PMIx_Init (self exists); no info.
        unsafe { PMIx_Finalize(std::ptr::null(), 0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_value(p: *const c_char) -> pmix_value_t {
        pmix_value_t {
            type_: PMIX_STRING,
            data: pmix_value_data {
                string: p.cast_mut(),
            },
        }
    }

    #[test]
    fn pmix_decodes_a_string_value() {
        let s = CString::new("10.0.0.1:4000 00ff").unwrap();
        // SAFETY: a NUL-terminated string alive for the call.
        let v = unsafe { decode_string(&string_value(s.as_ptr())) }.unwrap();
        assert_eq!(v, "10.0.0.1:4000 00ff");
    }

    #[test]
    fn pmix_refuses_a_wrong_type_a_null_a_long_or_a_non_utf8_string() {
        let s = CString::new("x").unwrap();
        let mut v = string_value(s.as_ptr());
        v.type_ = PMIX_UINT32;
        // SAFETY: not a string type: the union is not read as a pointer.
        let e = unsafe { decode_string(&v) }.unwrap_err().to_string();
        assert!(e.contains("type 14"), "{e}");
        // SAFETY: NULL is allowed.
        let e = unsafe { decode_string(&string_value(std::ptr::null())) }
            .unwrap_err()
            .to_string();
        assert!(e.contains("NULL"), "{e}");
        // no NUL within MAX_VALUE + 1 bytes: refused, nothing read beyond
        let long = vec![b'a'; MAX_VALUE + 1];
        // SAFETY: MAX_VALUE + 1 readable bytes, all strnlen may read.
        let e = unsafe { decode_string(&string_value(long.as_ptr().cast())) }
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than"), "{e}");
        let just = CString::new(vec![b'a'; MAX_VALUE]).unwrap();
        // SAFETY: a NUL-terminated string alive for the call.
        let ok = unsafe { decode_string(&string_value(just.as_ptr())) }.unwrap();
        assert_eq!(ok.len(), MAX_VALUE);
        let bad = CString::new(vec![0xff, 0xfe, b'a']).unwrap();
        // SAFETY: a NUL-terminated string alive for the call.
        let e = unsafe { decode_string(&string_value(bad.as_ptr())) }
            .unwrap_err()
            .to_string();
        assert!(e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn pmix_decodes_a_u32_and_refuses_other_types() {
        let v = pmix_value_t {
            type_: PMIX_UINT32,
            data: pmix_value_data { uint32: 6 },
        };
        assert_eq!(decode_u32(&v).unwrap(), 6);
        assert!(decode_u16(&v).is_err());
        let h = pmix_value_t {
            type_: PMIX_UINT16,
            data: pmix_value_data { uint16: 3 },
        };
        assert_eq!(decode_u16(&h).unwrap(), 3);
        let w = pmix_value_t {
            type_: PMIX_STRING,
            data: pmix_value_data {
                string: std::ptr::null_mut(),
            },
        };
        assert!(decode_u32(&w).is_err());
    }

    #[test]
    fn pmix_errors_name_the_call_and_the_status_string() {
        let e = check("PMIx_Fence", -24).unwrap_err().to_string();
        assert!(e.contains("PMIx_Fence") && e.contains("-24"), "{e}");
        assert!(e.to_uppercase().contains("TIMEOUT"), "{e}");
    }

    #[test]
    fn pmix_info_keys_are_nul_terminated_and_timeouts_round_up() {
        let i = timeout_info(Duration::from_millis(1500));
        assert_eq!(&i.key[..13], &b"pmix.timeout\0".map(|b| b as c_char));
        // SAFETY: timeout_info stores an integer.
        assert_eq!(unsafe { i.value.data.integer }, 2);
        let zero = timeout_info(Duration::ZERO);
        // SAFETY: as above.
        assert_eq!(unsafe { zero.value.data.integer }, 1);
        assert!(key_cstring(&"k".repeat(KEY_LEN)).is_err());
        assert!(key_cstring("a\0b").is_err());
    }
}
