//! Starting a rank: read the job and configuration, create this rank's
//! shared-memory file, meet the others at the bootstrap, map their files,
//! pass the start barrier and unlink the file. What comes out is a
//! [`World`]: the job, its fabric and the bootstrap link.

use crate::backoff::Backoff;
use crate::bootstrap::{Client, Collective, Hello, Hosted};
use crate::config::{Config, FabricKind};
use crate::fabric::hybrid::Hybrid;
use crate::fabric::rdma::device::{self, IbvDevice};
#[cfg(feature = "test-doubles")]
use crate::fabric::rdma::model::ModelDevice;
use crate::fabric::rdma::on_demand::SideChannel;
use crate::fabric::rdma::wire::Card;
use crate::fabric::rdma::PendingRdma;
use crate::fabric::shm::{PendingShm, ShmFabric};
use crate::fabric::udp::PendingUdp;
use crate::fabric::{AnyFabric, Channel, Fabric};
use crate::hang::{abort_error, rank_list, HangWatch};
use crate::job::{JobInfo, JobSource, ENV_BOOTSTRAP};
use crate::key::{JobKey, ENV_JOB_KEY};
use crate::segment::ShmFile;
use crate::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// Open this rank's RDMA device and prepare its queue pairs and buffers.
fn open_rdma(job: &JobInfo, config: &Config) -> Result<PendingRdma<IbvDevice>> {
    let cfg = config.rdma();
    let needed = config.segment_size as u64 + cfg.pinned_bytes(job.size);
    let dev = device::open(&device::DeviceChoice::from_env(needed)?)?;
    PendingRdma::with_own_segment_lazy(dev, job.rank, job.size, config.segment_size, cfg)
}

/// A rank's RDMA side before it connects: the real device, or the verbs
/// model (a test double, reachable only through
/// `World::start_over_verbs_model`, with the `test-doubles` feature).
enum RdmaStart {
    Device(Box<PendingRdma<IbvDevice>>),
    #[cfg(feature = "test-doubles")]
    Model(Box<PendingRdma<ModelDevice>>),
}

impl RdmaStart {
    fn card(&self) -> Card {
        match self {
            RdmaStart::Device(p) => p.card(),
            #[cfg(feature = "test-doubles")]
            RdmaStart::Model(p) => p.card(),
        }
    }

    /// Queue pairs are made on first contact, connected through `side`
    /// (the bootstrap's relay; none in a job of one rank).
    fn connect(self, cards: &[Card], side: Option<Box<dyn SideChannel>>) -> Result<AnyFabric> {
        Ok(match self {
            RdmaStart::Device(p) => AnyFabric::Rdma((*p).connect_lazy(cards, side)?),
            #[cfg(feature = "test-doubles")]
            RdmaStart::Model(p) => AnyFabric::RdmaModel((*p).connect_lazy(cards, side)?),
        })
    }
}

/// The ibverbs fabric connects its queue pairs on first contact through
/// the bootstrap connection's relay (sealed under the job key).
impl SideChannel for crate::bootstrap::Relay {
    fn send(&self, to: usize, msg: &[u8]) -> Result<()> {
        crate::bootstrap::Relay::send(self, to, msg)
    }
    fn pending(&self) -> bool {
        crate::bootstrap::Relay::pending(self)
    }
    fn take(&self) -> Option<(usize, Vec<u8>)> {
        crate::bootstrap::Relay::take(self)
    }
    fn dropped(&self) -> u64 {
        crate::bootstrap::Relay::dropped(self)
    }
}

/// How long a rank hosting the rendezvous waits, once the job has failed,
/// for the rendezvous to tell the other ranks before it reports the failure.
const PEERS_LEARN_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A started rank.
pub struct World {
    job: JobInfo,
    config: Config,
    key: JobKey,
    stem: String,
    fabric: AnyFabric,
    /// The segment ranges frozen read-only, shared with the fabrics.
    frozen: std::sync::Arc<crate::frozen::FrozenRanges>,
    link: Link,
    /// The rendezvous this rank hosts (rank 0 under srun / mpirun).
    hosted: parking_lot::Mutex<Option<Hosted>>,
    aborted: std::sync::atomic::AtomicBool,
}

/// The bootstrap connection (none for a 1-rank job) and the barrier count.
struct Link {
    boot: Option<Client>,
    epoch: AtomicU64,
}

/// Removes this rank's file unless disarmed (start-up failed half way).
struct UnlinkGuard(Option<std::path::PathBuf>);
impl Drop for UnlinkGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Link {
    /// Enter a bootstrap barrier of collective `kind` and wait for its
    /// release, calling `progress` meanwhile; reports a hang (naming the
    /// ranks the server says are missing, and `credits()`).
    fn barrier(
        &self,
        kind: Collective,
        rank: usize,
        config: &Config,
        progress: &mut dyn FnMut() -> Result<()>,
        credits: &dyn Fn() -> String,
    ) -> Result<()> {
        let Some(b) = &self.boot else { return Ok(()) };
        let e = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        b.enter_barrier(kind, e)?;
        let mut backoff = Backoff::new(config);
        let mut watch = HangWatch::new(config);
        let mut asked: Option<std::time::Instant> = None;
        loop {
            if b.released(e) {
                return Ok(());
            }
            if let Some(f) = b.failure() {
                // The reader records a release before a later failure: a
                // barrier that completed just before the job ended counts.
                return if b.released(e) { Ok(()) } else { Err(f) };
            }
            progress()?;
            if watch.due_on_round(backoff.is_slow()) {
                // Ask the server who is missing; report once it answered
                // (or after a second without an answer).
                let t = *asked.get_or_insert_with(|| {
                    let _ = b.ask_status(e);
                    std::time::Instant::now()
                });
                let status = b.status().filter(|s| s.epoch == e);
                if status.is_some() || t.elapsed() > std::time::Duration::from_secs(1) {
                    let who = match status {
                        Some(s) if !s.missing.is_empty() => format!(
                            "for rank{} {}, which {} not entered it",
                            if s.missing.len() > 1 { "s" } else { "" },
                            rank_list(&s.missing),
                            if s.missing.len() > 1 { "have" } else { "has" }
                        ),
                        Some(_) => "for the release (every rank has entered it)".into(),
                        None => "(the bootstrap did not say who is missing)".into(),
                    };
                    let what = format!("in {} #{e} {who}; {}", kind.name(), credits());
                    if let Err(why) = watch.report(rank, &what) {
                        b.abort(&why);
                        return Err(abort_error(rank, why));
                    }
                }
            }
            backoff.snooze();
        }
    }

    /// Tell every rank that this one failed (best effort).
    fn abort(&self, why: &str) {
        if let Some(b) = &self.boot {
            b.abort(why);
        }
    }
}

impl World {
    /// Start this rank from its environment. `table` is the upper layer's
    /// registration table; the bootstrap refuses to start a job whose ranks
    /// sent different tables.
    pub fn start(table: Vec<String>) -> Result<World> {
        let job = JobInfo::from_env()?;
        let config = Config::from_env().map_err(|e| e.at_rank(job.rank))?;
        Self::start_with(job, config, table)
    }

    /// Start with an explicit job and configuration.
    pub fn start_with(job: JobInfo, config: Config, table: Vec<String>) -> Result<World> {
        Self::start_inner(job, config, table, None)
    }

    /// **Test double.** Start this rank on the ibverbs fabric over the
    /// verbs model ([`ModelDevice`], one device per rank of one
    /// [`ModelNetwork`](crate::fabric::rdma::model::ModelNetwork)) instead
    /// of a real RDMA device, so the fabric and every layer above it run in
    /// `cargo test` on a machine without RDMA. The ranks are threads of one
    /// process; everything else (bootstrap, cards in the hello, the
    /// protocol) is the production path. Never chosen by configuration;
    /// only with the cargo feature `test-doubles`.
    #[cfg(feature = "test-doubles")]
    pub fn start_over_verbs_model(
        job: JobInfo,
        mut config: Config,
        table: Vec<String>,
        dev: ModelDevice,
    ) -> Result<World> {
        let rank = job.rank;
        config.fabric = FabricKind::Ibverbs;
        config.validate().map_err(|e| e.at_rank(rank))?;
        let p = PendingRdma::with_own_segment_lazy(
            dev,
            rank,
            job.size,
            config.segment_size,
            config.rdma(),
        )
        .map_err(|e| e.at_rank(rank))?;
        Self::start_inner(job, config, table, Some(RdmaStart::Model(Box::new(p))))
    }

    fn start_inner(
        job: JobInfo,
        mut config: Config,
        table: Vec<String>,
        rdma: Option<RdmaStart>,
    ) -> Result<World> {
        let rank = job.rank;
        let at = |e: Error| e.at_rank(rank);
        config.validate().map_err(at)?;
        if std::env::var(crate::trace::ENV_TRACE).is_ok_and(|v| v == "1") {
            crate::trace::set_enabled(true);
        }
        let need_key = |why: &str| {
            job.key.clone().ok_or_else(|| {
                at(Error::config(format!(
                    "{ENV_BOOTSTRAP} is set but {ENV_JOB_KEY} is not: {why} \
                     (e.g. `export {ENV_JOB_KEY}=$(openssl rand -hex 32)` once for the whole job)"
                )))
            })
        };
        // Under srun / mpirun without SPLITRT_BOOTSTRAP, rank 0 hosts it.
        let mut hosted = None;
        let (addr, key) = match (&job.bootstrap, job.source, job.size) {
            // splitrt-run hosts the rendezvous at the address it passed us
            (Some(a), JobSource::Splitrt, _) => (
                Some(a.clone()),
                need_key("splitrt-run sets both; a rank started by hand needs the job's key")?,
            ),
            (None, _, 1) => (None, job.key.clone().map_or_else(JobKey::generate, Ok)?),
            (given, _, _) => {
                let h = match given {
                    Some(a) => {
                        let key = need_key("every rank needs the same secret job key")?;
                        Hosted::at(&job, a, key, config.bootstrap_timeout)
                    }
                    None => Hosted::start(&job, config.bootstrap_timeout),
                }
                .map_err(at)?;
                let a = (Some(h.addr.clone()), h.key.clone());
                hosted = Some(h);
                a
            }
        };
        let stem = format!("{}-{}", job.job_id, key.file_tag());
        let host = crate::route::hostname();
        // On ibverbs, open the device first: its errors (no device, locked
        // memory, port, GID) are this rank's own and say what to change.
        let ibverbs = config.fabric == FabricKind::Ibverbs;
        let rdma = match rdma {
            Some(r) => Some(r),
            None if ibverbs => Some(RdmaStart::Device(Box::new(
                open_rdma(&job, &config).map_err(at)?,
            ))),
            None => None,
        };
        // Every rank may need the network: bind before joining so the
        // address travels with the hello.
        let mut udp = None;
        let mut peers = Vec::new();
        let boot = match addr {
            None => None,
            Some(addr) => {
                if !matches!(config.fabric, FabricKind::Shm | FabricKind::Ibverbs) {
                    let mut u = PendingUdp::bind(&addr).map_err(at)?;
                    if rank == 0 {
                        // a fresh per-job half of the datagram key
                        u.draw_job_nonce().map_err(at)?;
                    }
                    udp = Some(u);
                }
                // Settings every rank must share are checked with the
                // handler table (a mismatch names both ranks and values).
                use crate::config as c;
                let mut table = table;
                let mut setting = |name: &str, value: &dyn std::fmt::Display| {
                    table.push(format!("(setting) {name}={value}"))
                };
                // the segment's bounds: over UDP a rank checks the
                // offsets of its puts and Longs to a peer against its own
                // segment's length (`segment_len` of any peer), the
                // target's receive against the target's: with sizes that
                // differ, deposits a larger sender allows fail at the
                // target and a smaller one refuses what the target holds
                // (on ibverbs each rank learns the peer's length, but PGAS
                // offsets are symmetric: one rule on every fabric)
                setting(c::ENV_SEGMENT_SIZE, &config.segment_size);
                // a Medium a larger setting lets a rank send is refused by
                // a peer's reassembly with a smaller one, mid-job
                setting(c::ENV_MAX_MEDIUM, &config.max_medium);
                if ibverbs {
                    // a rank fills buffers of its own size into the
                    // receive buffers its peer posted at the peer's size,
                    // and counts credits by its own number of them
                    setting(c::ENV_IBV_BUFFER_SIZE, &config.ibv_buffer_size);
                    setting(c::ENV_IBV_BUFFERS, &config.ibv_buffers);
                }
                if udp.is_some() {
                    // the datagram size is the path's: a rank that set it
                    // lower for its host (a 1500-byte route) would still be
                    // sent the others' larger datagrams, fragmented or
                    // lost on that route; and a get's chunks are sized by
                    // the requester's value, its replies cut by the
                    // responder's. (Checked whenever a rank binds UDP, so
                    // also in a one-host `auto` job that ends up not using
                    // it: a rank cannot know that before the join.)
                    setting(c::ENV_UDP_MTU, &config.udp_mtu);
                    // a sender may have its own window in flight before
                    // the first acknowledgement tells it the receiver's:
                    // past a smaller receive window those datagrams are
                    // dropped (`beyond_window`) and resent, counted as
                    // losses (in the protocol, a sender of window 32 to a
                    // receiver of 8: 24 of its first 32 datagrams)
                    setting(c::ENV_UDP_WINDOW, &config.udp_window);
                    // a rank computing without polling is answered for by
                    // its keeper thread every quarter of its own
                    // keepalive (a fifth of its own timeout): a peer with
                    // a shorter timeout declares it dead meanwhile (a job
                    // whose rank 0 had 0.3 s and rank 1 the default 10 s
                    // failed so when rank 1 computed for 3 s; with 0.3 s
                    // on both it ran)
                    setting(
                        c::ENV_UDP_PEER_TIMEOUT,
                        &config.udp_peer_timeout.as_secs_f64(),
                    );
                    // The other UDP settings may differ: each acts on its
                    // own rank only. SPLITRT_UDP_SOURCE_FILTER is this
                    // socket's kernel filter (the protocol's checks are
                    // the same either way); SPLITRT_UDP_CC paces and
                    // limits what this rank sends (a receiver acknowledges,
                    // advertises its window and echoes times the same
                    // either way); SPLITRT_UDP_POLYVAL picks the code that
                    // computes the same tag bit for bit; and
                    // SPLITRT_UDP_FAULTS, a test tool, loses, duplicates
                    // or reorders this rank's datagrams, which the
                    // protocol recovers from whichever rank does it.
                }
                if config.fabric != FabricKind::Shm {
                    let auth = if config.udp_auth_body {
                        "full"
                    } else {
                        "header"
                    };
                    setting(c::ENV_UDP_AUTH, &auth);
                    // datagrams of another wire format would be dropped
                    // unread: refuse the job at start instead, naming it
                    setting("UDP wire format", &crate::fabric::udp::wire::VERSION);
                }
                let hello = Hello {
                    rank: rank as u32,
                    size: job.size as u32,
                    job: job.job_id.clone(),
                    host: host.clone(),
                    pid: std::process::id(),
                    table,
                    endpoint: match &rdma {
                        Some(r) => r.card().encode(),
                        None => udp.as_ref().map(PendingUdp::endpoint).unwrap_or_default(),
                    },
                };
                let (client, all) =
                    Client::join(&addr, &key, hello, config.bootstrap_timeout).map_err(at)?;
                peers = all;
                // everyone has joined: the address file has served its purpose
                if let Some(h) = hosted.as_mut() {
                    h.unpublish();
                }
                if config.fabric == FabricKind::Shm {
                    if let Some((p, other)) = peers.iter().enumerate().find(|(_, p)| p.host != host)
                    {
                        let why = format!(
                            "the job spans hosts '{host}' and '{}' (rank {p}) but {} says \
                             shm, which needs every rank on one host; use --fabric auto (or \
                             udp)",
                            other.host,
                            crate::config::ENV_FABRIC
                        );
                        client.abort(&why);
                        return Err(at(Error::config(why)));
                    }
                }
                Some(client)
            }
        };
        let abort = |e: Error| {
            if let Some(b) = &boot {
                b.abort(&e.to_string());
            }
            at(e)
        };
        // Which ranks share this host (shared memory), which are reached
        // over UDP.
        let members: Vec<usize> = match (config.fabric, peers.is_empty()) {
            (FabricKind::Ibverbs, _) => Vec::new(),
            (_, true) => vec![rank],
            (FabricKind::Udp, _) => Vec::new(),
            _ => (0..job.size).filter(|&p| peers[p].host == host).collect(),
        };
        let mut addrs = vec![None; job.size];
        if members.len() < job.size && !ibverbs {
            for (p, a) in addrs.iter_mut().enumerate() {
                if !members.contains(&p) {
                    *a = Some(
                        PendingUdp::parse_endpoint(p, &peers[p].endpoint)
                            .map_err(|e| abort(e.with_peer(p)))?,
                    );
                }
            }
        } else {
            udp = None;
        }
        // Datagrams are tagged with the job key mixed with rank 0's nonce,
        // so another job under the same job key cannot replay them here.
        let udp_key = match (&udp, peers.first()) {
            (Some(_), Some(p0)) => {
                crate::fabric::udp::job_nonce::JobNonce::from_rank0_endpoint(&p0.endpoint)
                    .map_err(abort)?
                    .datagram_key(&key)
            }
            _ => key.clone(),
        };
        // Files are made only once every rank has joined, so a job that
        // never starts leaves nothing in /dev/shm.
        let pending = if members.is_empty() {
            None
        } else {
            Some(
                PendingShm::create(&stem, rank, &members, job.size, &config.shm())
                    .map_err(abort)?,
            )
        };
        let mut guard = UnlinkGuard(pending.as_ref().map(|_| ShmFile::path_for(&stem, rank)));
        let link = Link {
            boot,
            epoch: AtomicU64::new(0),
        };
        // Every rank created its file: map them all.
        link.barrier(Collective::Setup, rank, &config, &mut || Ok(()), &|| {
            "the fabric is not connected yet".into()
        })?;
        let fail = |e: Error| {
            link.abort(&e.to_string());
            at(e)
        };
        let shm = match pending {
            Some(p) => Some(p.connect().map_err(fail)?),
            None => None,
        };
        let fabric = match (shm, udp) {
            _ if rdma.is_some() => {
                let r = rdma.expect("checked");
                // one rank alone connects to itself
                let cards = if peers.is_empty() {
                    vec![r.card()]
                } else {
                    peers
                        .iter()
                        .enumerate()
                        .map(|(p, h)| {
                            Card::decode(&h.endpoint, job.size).map_err(|why| {
                                Error::bootstrap(format!(
                                    "rank {p} sent no usable ibverbs card ({why}); \
                                     was it started with another --fabric?"
                                ))
                                .with_peer(p)
                            })
                        })
                        .collect::<Result<Vec<_>>>()
                        .map_err(fail)?
                };
                let side = link
                    .boot
                    .as_ref()
                    .map(|c| Box::new(c.relay()) as Box<dyn SideChannel>);
                r.connect(&cards, side).map_err(fail)?
            }
            (Some(s), None) => AnyFabric::Shm(s),
            (None, Some(u)) => AnyFabric::Udp(
                u.connect(rank, addrs, &udp_key, &config.udp())
                    .map_err(fail)?,
            ),
            (Some(s), Some(u)) => {
                let seg = s.local_segment();
                // SAFETY: `seg` is the shm fabric's own segment; both fabrics
                // go into one Hybrid (fields never moved out: the World owns
                // it and lends it only by reference), so the mapping lives
                // as long as the UDP fabric that deposits into it.
                let u = unsafe { u.connect_into(rank, addrs, &udp_key, &config.udp(), seg) }
                    .map_err(fail)?;
                AnyFabric::Hybrid(Hybrid::new(s, u))
            }
            (None, None) => return Err(fail(Error::usage("no fabric reaches the peers"))),
        };
        // Spinning only steals the CPU from the rank we wait for when the
        // host's ranks outnumber the CPUs they may run on.
        if !config.wait_set
            && crate::cpus::oversubscribed_here(
                job.local_size,
                fabric.shm().and_then(ShmFabric::cpu_masks),
            )
        {
            config.spin = std::time::Duration::ZERO;
        }
        let frozen = std::sync::Arc::<crate::frozen::FrozenRanges>::default();
        let mut fabric = fabric;
        fabric.share_frozen(frozen.clone());
        let world = World {
            job,
            config,
            key,
            stem,
            fabric,
            frozen,
            link,
            hosted: parking_lot::Mutex::new(hosted),
            aborted: Default::default(),
        };
        // Start barrier: every rank has mapped every file, so names can go.
        world.barrier_of(Collective::Start, &mut || Ok(()))?;
        if let Some(f) = world.fabric.shm() {
            f.unlink_own().map_err(at)?;
        }
        guard.0 = None;
        Ok(world)
    }

    /// The segment ranges frozen read-only on this rank: the layer above
    /// adds and removes them, the fabrics refuse deposits into them.
    pub fn frozen(&self) -> &crate::frozen::FrozenRanges {
        &self.frozen
    }

    /// The job.
    pub fn job(&self) -> &JobInfo {
        &self.job
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The fabric: raw sends (any tag, a Long deposit anywhere in a
    /// peer's segment) and one-sided puts, checked only against the
    /// segment's bounds.
    ///
    /// # Safety
    ///
    /// The fabric knows nothing of the ranges the upper layers of a rank
    /// hand out references over (`splitrt-am`'s reserved and frozen
    /// ranges). The caller must write (deposit, put) into a peer's segment
    /// only where that peer's layers allow it, as `splitrt-am` does by
    /// checking every Long and direct put against the reserved and frozen
    /// ranges before it sends. Deliveries the fabric hands out carry
    /// deposits as ranges, never as slices of the segment.
    ///
    /// No safe code reaches the raw fabric through a `World`:
    ///
    /// ```compile_fail,E0133
    /// fn raw(w: &splitrt_runtime::world::World) {
    ///     let _ = w.fabric();
    /// }
    /// ```
    pub unsafe fn fabric(&self) -> &AnyFabric {
        &self.fabric
    }

    /// The job key.
    pub fn key(&self) -> &JobKey {
        &self.key
    }

    /// What names this job's shared-memory files: `<job>-<key tag>`.
    pub fn file_stem(&self) -> &str {
        &self.stem
    }

    /// Whether another rank failed (one load, for polling loops;
    /// [`failure`](Self::failure) makes the error).
    #[inline]
    pub fn peer_failed(&self) -> bool {
        self.link.boot.as_ref().is_some_and(|b| b.has_failed())
    }

    /// If another rank failed, the error to report.
    pub fn failure(&self) -> Option<Error> {
        let failure = self.link.boot.as_ref().and_then(|b| b.failure())?;
        self.let_peers_learn();
        Some(failure)
    }

    /// When this rank hosts the rendezvous (srun, mpirun) and the job has
    /// failed: wait, bounded, until the rendezvous has told every other
    /// rank, since the program is likely to exit on the error it is about
    /// to see and would take the rendezvous with it.
    fn let_peers_learn(&self) {
        if let Some(h) = self.hosted.lock().as_mut() {
            h.wait_for_goodbyes(self.config.bootstrap_timeout.min(PEERS_LEARN_LIMIT));
        }
    }

    /// Bootstrap barrier (`Endpoint::barrier`): wait for every rank,
    /// calling `progress` while waiting so this rank keeps serving its
    /// peers. Fails if a rank dies or another rank is in a different
    /// collective.
    pub fn barrier(&self, progress: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.barrier_of(Collective::User, progress)
    }

    /// Bootstrap barrier of collective `kind`.
    pub fn barrier_of(
        &self,
        kind: Collective,
        progress: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        self.link
            .barrier(kind, self.job.rank, &self.config, progress, &|| {
                self.credit_report()
            })
    }

    /// Send credits toward peers that are short of them, as a sentence for
    /// hang reports.
    pub fn credit_report(&self) -> String {
        let f = &self.fabric;
        let mut short = Vec::new();
        for peer in 0..self.job.size {
            for (ch, name) in [(Channel::Request, "request"), (Channel::Reply, "reply")] {
                match f.credits(peer, ch) {
                    Some((free, total)) if free < total => {
                        short.push(format!("rank {peer} {name} {free}/{total}"))
                    }
                    Some(_) => {}
                    None => short.push(format!("rank {peer} {name} busy")),
                }
            }
        }
        if short.is_empty() {
            "send credits: all free".into()
        } else {
            format!(
                "send credits (free/total cells) short toward: {}",
                short.join(", ")
            )
        }
    }

    /// Wait until every peer acknowledged what this rank sent over the
    /// network (serving inbound traffic meanwhile), so nothing is owed when
    /// the processes end.
    pub fn drain_network(&self, progress: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        let fabric = &self.fabric;
        let mut backoff = Backoff::new(&self.config);
        let mut watch = HangWatch::new(&self.config);
        while !fabric.quiesced().map_err(|e| e.at_rank(self.job.rank))? {
            if let Some(f) = self.failure() {
                return Err(f);
            }
            progress()?;
            if watch.due_on_round(backoff.is_slow()) {
                let what = format!(
                    "for rank(s) {} to acknowledge what this rank sent over the network",
                    rank_list(&fabric.unacked_ranks())
                );
                if let Err(why) = watch.report(self.job.rank, &what) {
                    self.abort(&why);
                    return Err(abort_error(self.job.rank, why));
                }
            }
            backoff.snooze();
        }
        Ok(())
    }

    /// Exit barrier, then goodbye: after this no peer will send to us.
    pub fn finish(&self, progress: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.drain_network(progress)?;
        self.barrier_of(Collective::Exit, progress)?;
        if let Some(b) = &self.link.boot {
            // Everyone passed the exit barrier: the job is complete even if
            // the rendezvous has gone already, so the goodbye is best effort.
            b.bye();
        }
        if let Some(h) = self.hosted.lock().as_mut() {
            h.wait_for_goodbyes(self.config.bootstrap_timeout);
        }
        Ok(())
    }

    /// Tell every rank that this one failed (best effort).
    pub fn abort(&self, why: &str) {
        self.aborted.store(true, Ordering::Release);
        self.link.abort(why);
        self.let_peers_learn();
    }

    /// Whether the job has failed: another rank failed, or this one
    /// aborted it.
    pub fn has_failed(&self) -> bool {
        self.aborted.load(Ordering::Acquire) || (self.peer_failed() && self.failure().is_some())
    }
}
