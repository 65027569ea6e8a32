//! The real verbs layer: [the verbs trait](super::verbs::Verbs) over an
//! RDMA device through libibverbs (cargo feature `ibverbs`).
//!
//! The device is found with the `ibverbs` crate's [`devices`] list and
//! then driven through its FFI crate `ibverbs-sys`, because the safe API of
//! `ibverbs` 0.9 cannot register existing memory, cannot post RDMA read,
//! write or inline sends, hard-codes port 1 and ties protection domain,
//! completion queue and queue pairs to borrowed lifetimes. `ibv_post_send`,
//! `ibv_post_recv` and `ibv_poll_cq` are inline functions in `verbs.h`;
//! like the `ibverbs` crate, this layer calls them through the context's
//! operation table.
//!
//! One device (an [`IbvDevice`]) per rank: one protection domain, one
//! completion queue shared by every queue pair, reliable-connected queue
//! pairs with one scatter/gather entry per request, every send signaled.
//!
//! [`open`] checks, before anything is used, each with a message saying
//! what to change: that a device exists ([`ENV_IBV_DEVICE`] picks one),
//! that the locked-memory limit covers what the fabric pins
//! ([`check_memlock`]), that the port ([`ENV_IBV_PORT`]) is up, and on
//! RoCE that it has a GID ([`ENV_IBV_GID_INDEX`] picks one).
//!
//! Built without the feature, [`IbvDevice`] is an empty enum (no value can
//! exist) and [`open`] says how to rebuild, so callers compile the same in
//! both builds.
//!
//! [`devices`]: https://docs.rs/ibverbs/0.9/ibverbs/fn.devices.html

#[cfg(not(feature = "ibverbs"))]
use super::verbs::{Access, Completion, QpCaps, QpEndpoint, QpId, Region, SendWr, Sge, Verbs};
use crate::{Error, Result};

/// Which RDMA device to use (default: the first one listed).
pub const ENV_IBV_DEVICE: &str = "SPLITRT_IBV_DEVICE";
/// Which port of the device to use, 1..=255 (default 1).
pub const ENV_IBV_PORT: &str = "SPLITRT_IBV_PORT";
/// Which GID table entry to use (default: on RoCE the first RoCE v2 GID
/// with an IPv4 address, else the first RoCE v2 GID, else the first
/// non-zero one; on InfiniBand none, routing by LID within the subnet).
pub const ENV_IBV_GID_INDEX: &str = "SPLITRT_IBV_GID_INDEX";

/// The start of the error when no usable device exists.
pub const NO_DEVICE: &str = "no RDMA device found; use --fabric shm or udp";

/// What [`open`] opens, and what it must be able to pin.
///
/// The fabric fills it with [`DeviceChoice::from_env`] from
/// `SPLITRT_IBV_DEVICE` (a device name such as `mlx5_0`; default the
/// first device), `SPLITRT_IBV_PORT` (default 1) and
/// `SPLITRT_IBV_GID_INDEX` (default: on RoCE a RoCE v2 GID of the port,
/// preferably one with an IPv4 address; on InfiniBand none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceChoice {
    /// Device name (`mlx5_0`); `None`: the first device listed.
    pub name: Option<String>,
    /// Port number (1 for the first port).
    pub port: u8,
    /// GID table index; `None`: on RoCE the port's RoCE v2 GID with an
    /// IPv4 address (else another non-zero one), on InfiniBand no GID (LID
    /// routing).
    pub gid_index: Option<u32>,
    /// Bytes the fabric will register (segment and buffers): the
    /// locked-memory limit must allow at least this much.
    pub memlock_needed: u64,
}

impl DeviceChoice {
    /// The choice from `SPLITRT_IBV_DEVICE`, `SPLITRT_IBV_PORT` and
    /// `SPLITRT_IBV_GID_INDEX`, with `memlock_needed` bytes to pin; a
    /// malformed value is an error naming the variable.
    pub fn from_env(memlock_needed: u64) -> Result<DeviceChoice> {
        Self::from_lookup(
            |k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()),
            memlock_needed,
        )
    }

    /// [`from_env`](Self::from_env) with the variables from `get`.
    fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
        memlock_needed: u64,
    ) -> Result<DeviceChoice> {
        let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let name = set(ENV_IBV_DEVICE).map(|v| v.trim().to_string());
        let port = match set(ENV_IBV_PORT) {
            None => 1,
            Some(v) => v
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p >= 1)
                .ok_or_else(|| {
                    Error::config(format!(
                        "{ENV_IBV_PORT}={v:?}: expected a port number from 1 to 255"
                    ))
                })?,
        };
        let gid_index = match set(ENV_IBV_GID_INDEX) {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&i| i <= i32::MAX as u32)
                    .ok_or_else(|| {
                        Error::config(format!(
                            "{ENV_IBV_GID_INDEX}={v:?}: expected a GID table index (0, 1, ...)"
                        ))
                    })?,
            ),
        };
        Ok(DeviceChoice {
            name,
            port,
            gid_index,
            memlock_needed,
        })
    }
}

/// Check the locked-memory limit `current` (bytes; `None`: unlimited)
/// against the `needed` bytes the fabric pins; the error prints the limit
/// as `ulimit -l` shows it (KiB) and how to raise it.
///
/// ```
/// use splitrt_runtime::fabric::rdma::device::check_memlock;
/// assert!(check_memlock(None, 1 << 30).is_ok());
/// assert!(check_memlock(Some(64 << 10), 1 << 30).is_err());
/// ```
pub fn check_memlock(current: Option<u64>, needed: u64) -> Result<()> {
    match current {
        Some(cur) if cur < needed => Err(Error::config(format!(
            "locked-memory limit (`ulimit -l`) of {} KiB is too low: the ibverbs fabric pins \
             {} KiB ({needed} B: the segment and the message buffers); raise it with \
             `ulimit -l unlimited` or in /etc/security/limits.conf (memlock); under Slurm, \
             PropagateResourceLimits (and the limit slurmd itself runs with)",
            cur / 1024,
            needed.div_ceil(1024)
        ))),
        _ => Ok(()),
    }
}

#[cfg(feature = "ibverbs")]
pub use real::IbvDevice;

/// Open the RDMA device `choice` names, after checking that it exists,
/// that the locked-memory limit allows `choice.memlock_needed` bytes, that
/// the port is active and (RoCE) that it has a GID.
#[cfg(feature = "ibverbs")]
pub fn open(choice: &DeviceChoice) -> Result<IbvDevice> {
    real::open(choice)
}

/// An RDMA device. This build has no RDMA support (cargo feature
/// `ibverbs` off): no value of this type can exist, and [`open`] fails.
#[cfg(not(feature = "ibverbs"))]
#[derive(Debug)]
pub enum IbvDevice {}

/// Open an RDMA device: this build has none (cargo feature `ibverbs` off),
/// so this fails saying how to rebuild.
#[cfg(not(feature = "ibverbs"))]
pub fn open(choice: &DeviceChoice) -> Result<IbvDevice> {
    let _ = choice;
    Err(Error::config(
        "this splitrt was built without RDMA support; rebuild with `--features ibverbs`, \
         or use --fabric shm or udp",
    ))
}

#[cfg(not(feature = "ibverbs"))]
// SAFETY: uninhabited: no method can be called.
unsafe impl Verbs for IbvDevice {
    fn describe(&self) -> String {
        match *self {}
    }
    unsafe fn register(&mut self, _addr: *mut u8, _len: usize, _remote: Access) -> Result<Region> {
        match *self {}
    }
    fn deregister(&mut self, _region: &Region) -> Result<()> {
        match *self {}
    }
    fn create_qp(&mut self, _caps: QpCaps) -> Result<QpId> {
        match *self {}
    }
    fn max_inline(&self, _qp: QpId) -> u32 {
        match *self {}
    }
    fn endpoint(&self, _qp: QpId) -> QpEndpoint {
        match *self {}
    }
    fn connect(&mut self, _qp: QpId, _remote: &QpEndpoint) -> Result<()> {
        match *self {}
    }
    unsafe fn post_recv(&mut self, _qp: QpId, _wr_id: u64, _sge: Sge) -> Result<()> {
        match *self {}
    }
    unsafe fn post_send(&mut self, _qp: QpId, _wr: &SendWr) -> Result<()> {
        match *self {}
    }
    fn poll(&mut self, _out: &mut [Completion]) -> Result<usize> {
        match *self {}
    }
    fn destroy_qp(&mut self, _qp: QpId) -> Result<()> {
        match *self {}
    }
}

#[cfg(feature = "ibverbs")]
mod real {
    use super::{
        check_memlock, DeviceChoice, ENV_IBV_DEVICE, ENV_IBV_GID_INDEX, ENV_IBV_PORT, NO_DEVICE,
    };
    use crate::fabric::rdma::verbs::{
        Access, Completion, Op, QpCaps, QpEndpoint, QpId, Region, SendWr, Sge, Verbs, WcKind,
        WcStatus,
    };
    use crate::{Error, Result};
    use ibverbs_sys as ffi;
    use std::collections::{HashMap, VecDeque};
    use std::ffi::{c_int, CStr};
    use std::io;
    use std::ptr::{self, null_mut};

    /// Completion-queue entries at start (grown with `ibv_resize_cq` when
    /// the queue pairs need more).
    const CQ_START: c_int = 1 << 16;
    /// Completions taken per `poll_cq` call.
    const POLL_BATCH: usize = 32;
    /// Outstanding RDMA reads (and atomics) asked per queue pair, both
    /// directions (clamped to the device's limits).
    const RD_ATOMIC: u8 = 16;
    /// RNR NAK timer code 12: 0.64 ms before the sender retries.
    const MIN_RNR_TIMER: u8 = 12;
    /// Local ACK timeout code 14: 4.096 µs × 2^14 ≈ 67 ms per try.
    const TIMEOUT: u8 = 14;
    /// Transport retries before `RETRY_EXC_ERR`.
    const RETRY_CNT: u8 = 7;
    /// Receiver-not-ready retries (7: without limit).
    const RNR_RETRY: u8 = 7;
    /// Hop limit of the global route header (RoCE, or across subnets).
    const HOP_LIMIT: u8 = 64;

    type PostSendFn = unsafe extern "C" fn(
        *mut ffi::ibv_qp,
        *mut ffi::ibv_send_wr,
        *mut *mut ffi::ibv_send_wr,
    ) -> c_int;
    type PostRecvFn = unsafe extern "C" fn(
        *mut ffi::ibv_qp,
        *mut ffi::ibv_recv_wr,
        *mut *mut ffi::ibv_recv_wr,
    ) -> c_int;
    type PollCqFn = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int, *mut ffi::ibv_wc) -> c_int;

    /// The remote access flags of `a` (for a region or a queue pair).
    fn remote_flags(a: Access) -> ffi::ibv_access_flags {
        use ffi::ibv_access_flags as F;
        match a {
            Access::Local => F(0),
            Access::RemoteRead => F::IBV_ACCESS_REMOTE_READ,
            Access::RemoteReadWrite => F::IBV_ACCESS_REMOTE_READ | F::IBV_ACCESS_REMOTE_WRITE,
        }
    }

    /// One queue pair.
    struct Qp {
        qp: *mut ffi::ibv_qp,
        /// What the peer may do through it (set at INIT).
        remote: Access,
        qpn: u32,
        /// First packet sequence number we send (random, 24 bits).
        psn: u32,
        /// Inline bytes the device granted.
        max_inline: u32,
        /// Completion-queue entries reserved for it.
        cq_share: u64,
        /// Send-queue requests in post order: a completion in error carries
        /// no valid opcode, so its kind comes from here.
        sent: VecDeque<(u64, WcKind)>,
    }

    /// An open RDMA device: context, protection domain, one completion
    /// queue shared by every queue pair, the queue pairs and the memory
    /// regions. Dropping it destroys them in reverse order of creation.
    pub struct IbvDevice {
        /// `mlx5_0 port 1`.
        what: String,
        ctx: *mut ffi::ibv_context,
        pd: *mut ffi::ibv_pd,
        cq: *mut ffi::ibv_cq,
        /// Entries the completion queue holds.
        cq_cap: u64,
        /// Entries the queue pairs may fill at once.
        cq_need: u64,
        /// Indexed by [`QpId`]; `None` once destroyed.
        qps: Vec<Option<Qp>>,
        /// Queue pair number to index.
        by_qpn: HashMap<u32, u32>,
        /// Registered regions by local key.
        mrs: HashMap<u32, *mut ffi::ibv_mr>,
        port: u8,
        lid: u16,
        active_mtu: ffi::ibv_mtu,
        /// Ethernet link layer (RoCE): every connection needs a GRH.
        roce: bool,
        /// GID table index used as the source GID of a GRH.
        gid_index: u8,
        /// Our GID as published (zeros on InfiniBand without a chosen index).
        gid: [u8; 16],
        max_qp_wr: u32,
        max_cqe: u64,
        max_rd_atomic: u8,
        max_dest_rd_atomic: u8,
        post_send_fn: PostSendFn,
        post_recv_fn: PostRecvFn,
        poll_cq_fn: PollCqFn,
    }

    // SAFETY: the device exclusively owns the libibverbs objects its raw
    // pointers name (nothing else holds them); libibverbs objects may be
    // used from any thread, and `Verbs` takes `&mut self` for every verb
    // that changes state, so moving the device to another thread is sound.
    unsafe impl Send for IbvDevice {}

    fn no_device(why: impl std::fmt::Display) -> Error {
        Error::config(format!("{NO_DEVICE} ({why})"))
    }

    /// The error when `port` of `dev` is not active.
    pub(super) fn port_down(dev: &str, port: u8, state: &str) -> Error {
        Error::config(format!(
            "port {port} of {dev} is down (state {state}); check the cable / subnet manager \
             (`ibstat`)"
        ))
    }

    /// The error when a RoCE port has no GID at `index`.
    pub(super) fn no_gid(dev: &str, port: u8, index: u32) -> Error {
        Error::config(format!(
            "no GID at index {index} on {dev} port {port} (RoCE needs one: check the interface \
             has an IP address, `show_gids`); set {ENV_IBV_GID_INDEX}"
        ))
    }

    /// An errno a verb returned (some return it negated).
    fn errno(rc: c_int) -> io::Error {
        io::Error::from_raw_os_error(rc.saturating_abs())
    }

    /// The device to open, by the `ibverbs` crate's list: `want`, or the
    /// first one.
    fn discover(want: Option<&str>) -> Result<String> {
        let list = ibverbs::devices().map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::ENOSYS) {
                ": the kernel has no RDMA support"
            } else {
                ""
            };
            no_device(format_args!("ibverbs: {e}{hint}"))
        })?;
        let names: Vec<String> = list
            .iter()
            .filter_map(|d| d.name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        match (want, names.first()) {
            (_, None) => Err(no_device("ibverbs lists no device")),
            (None, Some(first)) => Ok(first.clone()),
            (Some(w), _) if names.iter().any(|n| n == w) => Ok(w.to_string()),
            (Some(w), _) => Err(no_device(format_args!(
                "{ENV_IBV_DEVICE}={w:?} is not among the devices here: {}",
                names.join(", ")
            ))),
        }
    }

    /// `ibv_open_device` on the device called `name`.
    fn open_context(name: &str) -> Result<*mut ffi::ibv_context> {
        let mut n: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count into `n`, which we
        // own, and returns a list we free below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(no_device(format_args!(
                "ibv_get_device_list: {}",
                io::Error::last_os_error()
            )));
        }
        let mut found = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n and the list holds `n` device pointers (after
            // them a NULL): an in-bounds offset.
            let slot = unsafe { list.add(i) };
            // SAFETY: entry `i` of the non-null list, which we own until
            // ibv_free_device_list below.
            let dev = unsafe { *slot };
            // SAFETY: `dev` is a listed device; its name is a C string that
            // lives as long as the list.
            let dname = unsafe { ffi::ibv_get_device_name(dev) };
            // SAFETY: checked non-null; a NUL-terminated string (above).
            if !dname.is_null() && unsafe { CStr::from_ptr(dname) }.to_bytes() == name.as_bytes() {
                // SAFETY: `dev` is a listed device and the list is not yet
                // freed.
                let ctx = unsafe { ffi::ibv_open_device(dev) };
                found = Some(if ctx.is_null() {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(ctx)
                });
                break;
            }
        }
        // SAFETY: `list` came from ibv_get_device_list and is freed once;
        // an opened context stays valid after the list is freed.
        unsafe { ffi::ibv_free_device_list(list) };
        match found {
            Some(Ok(ctx)) => Ok(ctx),
            Some(Err(e)) => Err(Error::io(format!("ibv_open_device({name})"), e)),
            None => Err(no_device(format_args!("{name} disappeared from the list"))),
        }
    }

    /// The GID at `index` of `port`.
    fn query_gid(ctx: *mut ffi::ibv_context, dev: &str, port: u8, index: u32) -> Result<[u8; 16]> {
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: `ctx` is an open context; ibv_query_gid writes only `gid`.
        let rc = unsafe { ffi::ibv_query_gid(ctx, port, index as c_int, &mut gid) };
        if rc != 0 {
            return Err(Error::io(
                format!("ibv_query_gid({dev} port {port} index {index})"),
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        Ok(unsafe { gid.raw })
    }

    /// The GID at `index` of `port` and its type (`IBV_GID_TYPE_*`); `None`
    /// when the entry is empty or cannot be read.
    fn gid_entry(ctx: *mut ffi::ibv_context, port: u8, index: u32) -> Option<([u8; 16], u32)> {
        let mut e = ffi::ibv_gid_entry::default();
        // SAFETY: `ctx` is an open context; the call writes only `e`, whose
        // size it is told.
        let rc = unsafe {
            ffi::_ibv_query_gid_ex(
                ctx,
                u32::from(port),
                index,
                &mut e,
                0,
                std::mem::size_of::<ffi::ibv_gid_entry>(),
            )
        };
        // SAFETY: every bit pattern is a valid `[u8; 16]`.
        let g = unsafe { e.gid.raw };
        (rc == 0 && g != [0; 16]).then_some((g, e.gid_type))
    }

    /// Whether `g` is an IPv4-mapped address (`::ffff:a.b.c.d`).
    fn ipv4_mapped(g: &[u8; 16]) -> bool {
        g[..10] == [0; 10] && g[10..12] == [0xff, 0xff]
    }

    /// The GID a RoCE port uses when none is chosen: the first RoCE v2 GID
    /// with an IPv4 address (routable; what RoCE fabrics are configured
    /// for), else the first RoCE v2 GID, else the first non-zero GID.
    fn pick_roce_gid(
        ctx: *mut ffi::ibv_context,
        dev: &str,
        port: u8,
        table: u32,
    ) -> Option<(u32, [u8; 16])> {
        let mut best: Option<(u8, u32, [u8; 16])> = None;
        for i in 0..table {
            let (g, ty) = match gid_entry(ctx, port, i) {
                Some(e) => e,
                None => match query_gid(ctx, dev, port, i) {
                    Ok(g) if g != [0; 16] => (g, u32::MAX),
                    _ => continue,
                },
            };
            let rank = match ty {
                ffi::IBV_GID_TYPE_ROCE_V2 if ipv4_mapped(&g) => 2,
                ffi::IBV_GID_TYPE_ROCE_V2 => 1,
                _ => 0,
            };
            if best.is_none_or(|(r, _, _)| rank > r) {
                best = Some((rank, i, g));
            }
        }
        best.map(|(_, i, g)| (i, g))
    }

    pub(super) fn open(choice: &DeviceChoice) -> Result<IbvDevice> {
        let name = discover(choice.name.as_deref())?;
        check_memlock(
            crate::limits::locked_memory(choice.memlock_needed),
            choice.memlock_needed,
        )?;
        let port = choice.port;
        let ctx = open_context(&name)?;
        // SAFETY: `ctx` is an open context; its operation table is filled
        // by the driver at open and not changed afterwards.
        let ops = unsafe { (*ctx).ops };
        let (Some(post_send_fn), Some(post_recv_fn), Some(poll_cq_fn)) =
            (ops.post_send, ops.post_recv, ops.poll_cq)
        else {
            // SAFETY: our context, closed once; nothing was created in it.
            unsafe { ffi::ibv_close_device(ctx) };
            return Err(Error::config(format!(
                "the driver of {name} provides no post_send, post_recv or poll_cq \
                 (libibverbs and the driver disagree?)"
            )));
        };
        // From here on, dropping `d` closes what is open so far.
        let mut d = IbvDevice {
            what: format!("{name} port {port}"),
            ctx,
            pd: null_mut(),
            cq: null_mut(),
            cq_cap: 0,
            cq_need: 0,
            qps: Vec::new(),
            by_qpn: HashMap::new(),
            mrs: HashMap::new(),
            port,
            lid: 0,
            active_mtu: ffi::IBV_MTU_1024,
            roce: false,
            gid_index: 0,
            gid: [0; 16],
            max_qp_wr: 0,
            max_cqe: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            post_send_fn,
            post_recv_fn,
            poll_cq_fn,
        };

        let mut attr = ffi::ibv_device_attr::default();
        // SAFETY: `ctx` is open; ibv_query_device writes only `attr`.
        let rc = unsafe { ffi::ibv_query_device(ctx, &mut attr) };
        if rc != 0 {
            return Err(Error::io(format!("ibv_query_device({name})"), errno(rc)));
        }
        if port == 0 || port > attr.phys_port_cnt {
            return Err(Error::config(format!(
                "{name} has no port {port} (it has {} port(s)); set {}",
                attr.phys_port_cnt, ENV_IBV_PORT
            )));
        }
        d.max_qp_wr = attr.max_qp_wr.max(0) as u32;
        d.max_cqe = attr.max_cqe.max(0) as u64;
        d.max_rd_atomic = attr.max_qp_init_rd_atom.clamp(0, RD_ATOMIC as c_int) as u8;
        d.max_dest_rd_atomic = attr.max_qp_rd_atom.clamp(0, RD_ATOMIC as c_int) as u8;

        let mut pattr = ffi::ibv_port_attr::default();
        // SAFETY: `ctx` is open; the exported ibv_query_port fills the
        // provider's full `ibv_port_attr`, of which the compat type is the
        // prefix (as the `ibverbs` crate calls it).
        let rc = unsafe {
            ffi::ibv_query_port(
                ctx,
                port,
                &mut pattr as *mut ffi::ibv_port_attr as *mut ffi::_compat_ibv_port_attr,
            )
        };
        if rc != 0 {
            return Err(Error::io(
                format!("ibv_query_port({name} port {port})"),
                errno(rc),
            ));
        }
        if !matches!(
            pattr.state,
            ffi::ibv_port_state::IBV_PORT_ACTIVE | ffi::ibv_port_state::IBV_PORT_ACTIVE_DEFER
        ) {
            // SAFETY: ibv_port_state_str returns a static C string (or null).
            let s = unsafe { ffi::ibv_port_state_str(pattr.state) };
            let state = if s.is_null() {
                pattr.state.to_string()
            } else {
                // SAFETY: non-null static NUL-terminated string.
                unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
            };
            return Err(port_down(&name, port, &state));
        }
        d.lid = pattr.lid;
        d.active_mtu = pattr.active_mtu;
        d.roce = u32::from(pattr.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET;
        let table = pattr.gid_tbl_len.max(0) as u32;
        let (index, gid) = match (choice.gid_index, d.roce) {
            (Some(i), _) => {
                if i >= table {
                    return Err(Error::config(format!(
                        "{ENV_IBV_GID_INDEX}={i} is out of range: {name} port {port} has {table} \
                         GID table entries"
                    )));
                }
                let g = query_gid(ctx, &name, port, i)?;
                if d.roce && g == [0; 16] {
                    return Err(no_gid(&name, port, i));
                }
                (i, g)
            }
            (None, true) => {
                pick_roce_gid(ctx, &name, port, table).ok_or_else(|| no_gid(&name, port, 0))?
            }
            // InfiniBand within a subnet: LID routing, no GRH
            (None, false) => (0, [0; 16]),
        };
        d.gid_index = u8::try_from(index).map_err(|_| {
            Error::config(format!(
                "{ENV_IBV_GID_INDEX}={index}: the GID index must be below 256"
            ))
        })?;
        d.gid = gid;

        // SAFETY: `ctx` is open.
        d.pd = unsafe { ffi::ibv_alloc_pd(ctx) };
        if d.pd.is_null() {
            return Err(Error::io(
                format!("ibv_alloc_pd({name})"),
                io::Error::last_os_error(),
            ));
        }
        let cqe = CQ_START.min(attr.max_cqe.max(1));
        // SAFETY: `ctx` is open; no context pointer, channel or vector.
        d.cq = unsafe { ffi::ibv_create_cq(ctx, cqe, null_mut(), null_mut(), 0) };
        if d.cq.is_null() {
            return Err(Error::io(
                format!("ibv_create_cq({name}, {cqe} entries)"),
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `d.cq` is the live completion queue just created.
        d.cq_cap = unsafe { (*d.cq).cqe }.max(0) as u64;
        Ok(d)
    }

    impl IbvDevice {
        fn qp(&self, qp: QpId) -> Result<&Qp> {
            self.qps
                .get(qp.0 as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| Error::usage(format!("{}: no queue pair {}", self.what, qp.0)))
        }

        fn qp_mut(&mut self, qp: QpId) -> Result<&mut Qp> {
            let what = &self.what;
            self.qps
                .get_mut(qp.0 as usize)
                .and_then(Option::as_mut)
                .ok_or_else(|| Error::usage(format!("{what}: no queue pair {}", qp.0)))
        }

        /// Grow the completion queue to hold `need` entries.
        fn ensure_cq(&mut self, need: u64) -> Result<()> {
            if need <= self.cq_cap {
                return Ok(());
            }
            if need > self.max_cqe {
                return Err(Error::config(format!(
                    "{}: the queue pairs need a completion queue of {need} entries, more than \
                     the device's {} (fewer ranks per device, or lower SPLITRT_IBV_BUFFERS)",
                    self.what, self.max_cqe
                )));
            }
            let want = need.max(2 * self.cq_cap).min(self.max_cqe);
            let want = c_int::try_from(want).unwrap_or(c_int::MAX);
            // SAFETY: `self.cq` is our live completion queue.
            let rc = unsafe { ffi::ibv_resize_cq(self.cq, want) };
            if rc != 0 {
                return Err(Error::io(
                    format!(
                        "ibv_resize_cq({}, {} to {want} entries)",
                        self.what, self.cq_cap
                    ),
                    errno(rc),
                ));
            }
            // SAFETY: as above; resize updated `cqe`.
            self.cq_cap = unsafe { (*self.cq).cqe }.max(0) as u64;
            Ok(())
        }

        fn modify(
            &self,
            qp: *mut ffi::ibv_qp,
            attr: &mut ffi::ibv_qp_attr,
            mask: ffi::ibv_qp_attr_mask,
            state: &str,
        ) -> Result<()> {
            // SAFETY: `qp` is one of our live queue pairs; ibv_modify_qp
            // reads `attr`, which we own.
            let rc = unsafe { ffi::ibv_modify_qp(qp, attr, mask.0 as c_int) };
            if rc != 0 {
                return Err(Error::io(
                    format!("ibv_modify_qp({}, to {state})", self.what),
                    errno(rc),
                ));
            }
            Ok(())
        }
    }

    // SAFETY: every call is the libibverbs verb itself on a real RC device,
    // which keeps the contract (keys and bounds checked by the device;
    // completions only of posted work requests, with their wr_ids).
    unsafe impl Verbs for IbvDevice {
        fn describe(&self) -> String {
            self.what.clone()
        }

        unsafe fn register(&mut self, addr: *mut u8, len: usize, remote: Access) -> Result<Region> {
            if len == 0 {
                // nothing to access; devices refuse empty regions
                return Ok(Region {
                    addr: addr as u64,
                    len: 0,
                    lkey: 0,
                    rkey: 0,
                });
            }
            let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | remote_flags(remote);
            // SAFETY: `self.pd` is our live protection domain; the caller
            // keeps `len` bytes at `addr` mapped until deregister
            // (`Verbs::register`'s `# Safety` contract).
            let mr = unsafe { ffi::ibv_reg_mr(self.pd, addr.cast(), len, access.0 as c_int) };
            if mr.is_null() {
                let e = io::Error::last_os_error();
                let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
                    " (is the locked-memory limit, `ulimit -l`, large enough?)"
                } else {
                    ""
                };
                return Err(Error::io(
                    format!("ibv_reg_mr({}, {len} B){hint}", self.what),
                    e,
                ));
            }
            // SAFETY: `mr` is the region ibv_reg_mr just returned (checked
            // non-null above), live until we deregister it; its keys are
            // plain integers the library does not change.
            let mr_ref = unsafe { &*mr };
            let (lkey, rkey) = (mr_ref.lkey, mr_ref.rkey);
            self.mrs.insert(lkey, mr);
            Ok(Region {
                addr: addr as u64,
                len,
                lkey,
                rkey: if remote > Access::Local { rkey } else { 0 },
            })
        }

        fn deregister(&mut self, region: &Region) -> Result<()> {
            if region.len == 0 {
                return Ok(());
            }
            let mr = self.mrs.remove(&region.lkey).ok_or_else(|| {
                Error::usage(format!(
                    "{}: no registered region with local key {:#x}",
                    self.what, region.lkey
                ))
            })?;
            // SAFETY: `mr` was registered by us and is deregistered once
            // (removed from the map above).
            let rc = unsafe { ffi::ibv_dereg_mr(mr) };
            if rc != 0 {
                return Err(Error::io(
                    format!("ibv_dereg_mr({}, {} B)", self.what, region.len),
                    errno(rc),
                ));
            }
            Ok(())
        }

        fn create_qp(&mut self, caps: QpCaps) -> Result<QpId> {
            let deepest = caps.send_depth.max(caps.recv_depth);
            if deepest > self.max_qp_wr {
                return Err(Error::config(format!(
                    "{}: a queue pair of {} sends and {} receives exceeds the device's {} work \
                     requests (lower SPLITRT_IBV_BUFFERS)",
                    self.what, caps.send_depth, caps.recv_depth, self.max_qp_wr
                )));
            }
            let share = u64::from(caps.send_depth) + u64::from(caps.recv_depth);
            self.ensure_cq(self.cq_need + share)?;
            let mut inline = caps.max_inline;
            let (qp, granted) = loop {
                let mut init = ffi::ibv_qp_init_attr {
                    qp_context: null_mut(),
                    send_cq: self.cq,
                    recv_cq: self.cq,
                    srq: null_mut(),
                    cap: ffi::ibv_qp_cap {
                        max_send_wr: caps.send_depth,
                        max_recv_wr: caps.recv_depth,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: inline,
                    },
                    qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
                    sq_sig_all: 0,
                };
                // SAFETY: `self.pd` and `self.cq` are live; ibv_create_qp
                // reads `init` and writes the granted capabilities back.
                let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
                if !qp.is_null() {
                    break (qp, init.cap.max_inline_data);
                }
                let e = io::Error::last_os_error();
                // a device refuses more inline bytes than it supports: ask less
                if inline > 0 && e.raw_os_error() == Some(libc::EINVAL) {
                    inline = if inline > 16 { inline / 2 } else { 0 };
                    continue;
                }
                return Err(Error::io(
                    format!(
                        "ibv_create_qp({}, {} sends, {} receives, {} B inline)",
                        self.what, caps.send_depth, caps.recv_depth, inline
                    ),
                    e,
                ));
            };
            // SAFETY: `qp` is the queue pair just created.
            let qpn = unsafe { (*qp).qp_num };
            let id = self.qps.len() as u32;
            self.qps.push(Some(Qp {
                qp,
                remote: caps.remote,
                qpn,
                psn: rand::random::<u32>() & 0x00ff_ffff,
                max_inline: granted,
                cq_share: share,
                sent: VecDeque::with_capacity(caps.send_depth as usize),
            }));
            self.by_qpn.insert(qpn, id);
            self.cq_need += share;
            Ok(QpId(id))
        }

        fn max_inline(&self, qp: QpId) -> u32 {
            self.qp(qp).map_or(0, |q| q.max_inline)
        }

        fn endpoint(&self, qp: QpId) -> QpEndpoint {
            match self.qp(qp) {
                Ok(q) => QpEndpoint {
                    lid: self.lid,
                    qpn: q.qpn,
                    psn: q.psn,
                    gid: self.gid,
                },
                Err(_) => QpEndpoint::default(),
            }
        }

        fn connect(&mut self, qp: QpId, remote: &QpEndpoint) -> Result<()> {
            let (raw, psn, remote_access) = {
                let q = self.qp(qp)?;
                (q.qp, q.psn, q.remote)
            };
            use ffi::ibv_qp_attr_mask as M;
            let flags = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | remote_flags(remote_access);

            let mut a = ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
                pkey_index: 0,
                port_num: self.port,
                qp_access_flags: flags.0,
                ..Default::default()
            };
            self.modify(
                raw,
                &mut a,
                M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
                "INIT",
            )?;

            let mut ah = ffi::ibv_ah_attr {
                dlid: remote.lid,
                sl: 0,
                src_path_bits: 0,
                port_num: self.port,
                ..Default::default()
            };
            if self.roce || remote.gid != [0; 16] {
                ah.is_global = 1;
                ah.grh.dgid.raw = remote.gid;
                ah.grh.sgid_index = self.gid_index;
                ah.grh.hop_limit = HOP_LIMIT;
            }
            let mut a = ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
                path_mtu: self.active_mtu,
                dest_qp_num: remote.qpn,
                rq_psn: remote.psn & 0x00ff_ffff,
                max_dest_rd_atomic: self.max_dest_rd_atomic,
                min_rnr_timer: MIN_RNR_TIMER,
                ah_attr: ah,
                ..Default::default()
            };
            self.modify(
                raw,
                &mut a,
                M::IBV_QP_STATE
                    | M::IBV_QP_AV
                    | M::IBV_QP_PATH_MTU
                    | M::IBV_QP_DEST_QPN
                    | M::IBV_QP_RQ_PSN
                    | M::IBV_QP_MAX_DEST_RD_ATOMIC
                    | M::IBV_QP_MIN_RNR_TIMER,
                "RTR",
            )?;

            let mut a = ffi::ibv_qp_attr {
                qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
                timeout: TIMEOUT,
                retry_cnt: RETRY_CNT,
                rnr_retry: RNR_RETRY,
                sq_psn: psn,
                max_rd_atomic: self.max_rd_atomic,
                ..Default::default()
            };
            self.modify(
                raw,
                &mut a,
                M::IBV_QP_STATE
                    | M::IBV_QP_TIMEOUT
                    | M::IBV_QP_RETRY_CNT
                    | M::IBV_QP_RNR_RETRY
                    | M::IBV_QP_SQ_PSN
                    | M::IBV_QP_MAX_QP_RD_ATOMIC,
                "RTS",
            )
        }

        unsafe fn post_recv(&mut self, qp: QpId, wr_id: u64, sge: Sge) -> Result<()> {
            let raw = self.qp(qp)?.qp;
            let mut s = ffi::ibv_sge {
                addr: sge.addr,
                length: sge.len,
                lkey: sge.lkey,
            };
            let mut wr = ffi::ibv_recv_wr {
                wr_id,
                next: null_mut(),
                sg_list: &mut s,
                num_sge: c_int::from(sge.len > 0),
            };
            let mut bad = null_mut();
            // SAFETY: `raw` is our live queue pair; the driver's post_recv
            // reads `wr` and `s` during the call only (the memory they
            // describe is the caller's, registered and kept until the
            // completion).
            let rc = unsafe { (self.post_recv_fn)(raw, &mut wr, &mut bad) };
            if rc != 0 {
                return Err(Error::io(
                    format!("ibv_post_recv({}, {} B)", self.what, sge.len),
                    errno(rc),
                ));
            }
            Ok(())
        }

        unsafe fn post_send(&mut self, qp: QpId, wr: &SendWr) -> Result<()> {
            let (raw, max_inline) = {
                let q = self.qp(qp)?;
                (q.qp, q.max_inline)
            };
            if wr.inline && wr.sge.len > max_inline {
                return Err(Error::usage(format!(
                    "{}: inline request of {} B, the queue pair takes at most {max_inline} B",
                    self.what, wr.sge.len
                )));
            }
            let (opcode, kind, rdma) = match wr.op {
                Op::Send => (ffi::ibv_wr_opcode::IBV_WR_SEND, WcKind::Send, None),
                Op::Write { raddr, rkey } => (
                    ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
                    WcKind::Write,
                    Some((raddr, rkey)),
                ),
                Op::Read { raddr, rkey } => (
                    ffi::ibv_wr_opcode::IBV_WR_RDMA_READ,
                    WcKind::Read,
                    Some((raddr, rkey)),
                ),
            };
            let mut flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED;
            if wr.inline {
                flags |= ffi::ibv_send_flags::IBV_SEND_INLINE;
            }
            if wr.fence {
                flags |= ffi::ibv_send_flags::IBV_SEND_FENCE;
            }
            let mut s = ffi::ibv_sge {
                addr: wr.sge.addr,
                length: wr.sge.len,
                lkey: wr.sge.lkey,
            };
            let mut w = ffi::ibv_send_wr {
                wr_id: wr.wr_id,
                next: null_mut(),
                sg_list: &mut s,
                num_sge: c_int::from(wr.sge.len > 0),
                opcode,
                send_flags: flags.0,
                ..Default::default()
            };
            if let Some((remote_addr, rkey)) = rdma {
                w.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            let mut bad = null_mut();
            // SAFETY: `raw` is our live queue pair; the driver's post_send
            // reads `w` and `s` during the call only (and copies inline
            // bytes then); other memory they describe is the caller's,
            // registered and kept until the completion.
            let rc = unsafe { (self.post_send_fn)(raw, &mut w, &mut bad) };
            if rc != 0 {
                let verb = match kind {
                    WcKind::Write => "RDMA write",
                    WcKind::Read => "RDMA read",
                    _ => "send",
                };
                return Err(Error::io(
                    format!("ibv_post_send({}, {verb} of {} B)", self.what, wr.sge.len),
                    errno(rc),
                ));
            }
            self.qp_mut(qp)?.sent.push_back((wr.wr_id, kind));
            Ok(())
        }

        fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
            let mut wc = [ffi::ibv_wc::default(); POLL_BATCH];
            let mut got = 0;
            while got < out.len() {
                let want = (out.len() - got).min(POLL_BATCH);
                // SAFETY: `self.cq` is our live completion queue; the
                // driver writes at most `want` entries into `wc`.
                let n = unsafe { (self.poll_cq_fn)(self.cq, want as c_int, wc.as_mut_ptr()) };
                if n < 0 {
                    return Err(Error::io(
                        format!("ibv_poll_cq({})", self.what),
                        io::Error::other(format!("the driver returned {n}")),
                    ));
                }
                let n = n as usize;
                for w in &wc[..n.min(want)] {
                    let Some(&id) = self.by_qpn.get(&w.qp_num) else {
                        continue; // a destroyed queue pair's leftovers
                    };
                    let Some(Some(q)) = self.qps.get_mut(id as usize) else {
                        continue;
                    };
                    let status = match w.error() {
                        None => WcStatus::Success,
                        Some((s, _vendor)) => match s {
                            ffi::ibv_wc_status::IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
                            ffi::ibv_wc_status::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
                            ffi::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => {
                                WcStatus::ReceiverNotReady
                            }
                            ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
                            ffi::ibv_wc_status::IBV_WC_RETRY_EXC_ERR => WcStatus::Transport,
                            other => WcStatus::Other(other),
                        },
                    };
                    let kind = if status == WcStatus::Success {
                        // the opcode is valid only on success
                        match w.opcode() {
                            ffi::ibv_wc_opcode::IBV_WC_SEND => Some(WcKind::Send),
                            ffi::ibv_wc_opcode::IBV_WC_RDMA_WRITE => Some(WcKind::Write),
                            ffi::ibv_wc_opcode::IBV_WC_RDMA_READ => Some(WcKind::Read),
                            op if op & ffi::ibv_wc_opcode::IBV_WC_RECV != 0 => None,
                            _ => q.sent.front().map(|&(_, k)| k),
                        }
                    } else if q.sent.front().is_some_and(|&(id, _)| id == w.wr_id()) {
                        q.sent.front().map(|&(_, k)| k)
                    } else {
                        None
                    };
                    // a send-queue completion retires the oldest request
                    let kind = match kind {
                        Some(k) => {
                            q.sent.pop_front();
                            k
                        }
                        None => WcKind::Recv,
                    };
                    out[got] = Completion {
                        wr_id: w.wr_id(),
                        qp: QpId(id),
                        kind,
                        status,
                        len: w.len() as u32,
                    };
                    got += 1;
                }
                if n < want {
                    break;
                }
            }
            Ok(got)
        }

        fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
            let q = self
                .qps
                .get_mut(qp.0 as usize)
                .and_then(Option::take)
                .ok_or_else(|| Error::usage(format!("{}: no queue pair {}", self.what, qp.0)))?;
            // SAFETY: `q.qp` is our queue pair, destroyed once (taken out of
            // the table above; put back if the destruction fails).
            let rc = unsafe { ffi::ibv_destroy_qp(q.qp) };
            if rc != 0 {
                let e = Error::io(
                    format!("ibv_destroy_qp({}, queue pair {})", self.what, q.qpn),
                    errno(rc),
                );
                self.qps[qp.0 as usize] = Some(q);
                return Err(e);
            }
            self.by_qpn.remove(&q.qpn);
            self.cq_need -= q.cq_share;
            Ok(())
        }
    }

    impl Drop for IbvDevice {
        fn drop(&mut self) {
            // Errors cannot be reported from here; the kernel reclaims
            // whatever a failed call left when the process exits.
            for q in self.qps.drain(..).flatten() {
                // SAFETY: our queue pair, destroyed once.
                unsafe { ffi::ibv_destroy_qp(q.qp) };
            }
            for (_, mr) in self.mrs.drain() {
                // SAFETY: our region, deregistered once.
                unsafe { ffi::ibv_dereg_mr(mr) };
            }
            if !self.cq.is_null() {
                // SAFETY: our completion queue; no queue pair uses it now.
                unsafe { ffi::ibv_destroy_cq(self.cq) };
                self.cq = ptr::null_mut();
            }
            if !self.pd.is_null() {
                // SAFETY: our protection domain; nothing uses it now.
                unsafe { ffi::ibv_dealloc_pd(self.pd) };
                self.pd = ptr::null_mut();
            }
            if !self.ctx.is_null() {
                // SAFETY: our context; every object in it is gone.
                unsafe { ffi::ibv_close_device(self.ctx) };
                self.ctx = ptr::null_mut();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn msg(r: Result<DeviceChoice>) -> String {
        match r {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn memlock_unlimited_or_enough_is_fine() {
        assert!(check_memlock(None, u64::MAX).is_ok());
        assert!(check_memlock(Some(1 << 30), 1 << 30).is_ok());
        assert!(check_memlock(Some(0), 0).is_ok());
    }

    #[test]
    fn memlock_too_low_says_how_much_and_how_to_fix() {
        let e = check_memlock(Some(64 * 1024), 300 * 1024 * 1024 + 1)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("locked-memory limit"), "{e}");
        assert!(e.contains("64 KiB"), "{e}");
        assert!(e.contains(&format!("{} KiB", 300 * 1024 + 1)), "{e}");
        assert!(e.contains("ulimit -l"), "{e}");
        assert!(e.contains("limits.conf"), "{e}");
        assert!(e.contains("PropagateResourceLimits"), "{e}");
    }

    #[test]
    fn choice_defaults() {
        let c = DeviceChoice::from_lookup(lookup(&[]), 123).expect("defaults");
        assert_eq!(
            c,
            DeviceChoice {
                name: None,
                port: 1,
                gid_index: None,
                memlock_needed: 123
            }
        );
        let c = DeviceChoice::from_lookup(
            lookup(&[
                (ENV_IBV_DEVICE, " mlx5_1 "),
                (ENV_IBV_PORT, "2"),
                (ENV_IBV_GID_INDEX, "3"),
            ]),
            0,
        )
        .expect("set");
        assert_eq!(c.name.as_deref(), Some("mlx5_1"));
        assert_eq!(c.port, 2);
        assert_eq!(c.gid_index, Some(3));
        // empty means unset
        let c = DeviceChoice::from_lookup(lookup(&[(ENV_IBV_DEVICE, ""), (ENV_IBV_PORT, " ")]), 0)
            .expect("empty");
        assert_eq!((c.name, c.port), (None, 1));
    }

    #[test]
    fn choice_bad_values_are_named() {
        for bad in ["0", "256", "-1", "one"] {
            let e = msg(DeviceChoice::from_lookup(lookup(&[(ENV_IBV_PORT, bad)]), 0));
            assert!(e.contains("SPLITRT_IBV_PORT") && e.contains(bad), "{e}");
        }
        for bad in ["-1", "x", "4294967296"] {
            let e = msg(DeviceChoice::from_lookup(
                lookup(&[(ENV_IBV_GID_INDEX, bad)]),
                0,
            ));
            assert!(
                e.contains("SPLITRT_IBV_GID_INDEX") && e.contains(bad),
                "{e}"
            );
        }
    }

    fn open_err(c: &DeviceChoice) -> Option<String> {
        open(c).err().map(|e| e.to_string())
    }

    #[cfg(not(feature = "ibverbs"))]
    #[test]
    fn open_without_the_feature_says_to_rebuild() {
        let c = DeviceChoice::from_lookup(lookup(&[]), 0).expect("defaults");
        let e = open_err(&c).unwrap_or_default();
        assert!(e.contains("built without RDMA support"), "{e}");
        assert!(e.contains("--features ibverbs"), "{e}");
        assert!(e.contains("--fabric shm or udp"), "{e}");
    }

    #[cfg(feature = "ibverbs")]
    #[test]
    fn open_without_a_device_says_so() {
        let has_device = std::fs::read_dir("/sys/class/infiniband")
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        if has_device {
            eprintln!("skipped: this machine has an RDMA device");
            return;
        }
        for name in [None, Some("mlx5_0".to_string())] {
            let c = DeviceChoice {
                name,
                port: 1,
                gid_index: None,
                memlock_needed: u64::MAX,
            };
            let e = open_err(&c).unwrap_or_default();
            eprintln!("{e}");
            assert!(
                e.contains("no RDMA device found; use --fabric shm or udp"),
                "{e}"
            );
        }
    }

    #[cfg(feature = "ibverbs")]
    #[test]
    fn port_and_gid_messages() {
        let e = real::port_down("mlx5_0", 1, "PORT_DOWN").to_string();
        assert!(
            e.contains("port 1 of mlx5_0 is down (state PORT_DOWN)") && e.contains("ibstat"),
            "{e}"
        );
        let e = real::no_gid("mlx5_0", 1, 3).to_string();
        assert!(
            e.contains("no GID at index 3 on mlx5_0 port 1")
                && e.contains("show_gids")
                && e.contains(ENV_IBV_GID_INDEX),
            "{e}"
        );
    }
}
