//! Which verbs vys reads by RDMA run over: the RDMA device (cargo feature
//! `ibverbs`, chosen by `SPLITRT_IBV_DEVICE` / `SPLITRT_IBV_PORT` /
//! `SPLITRT_IBV_GID_INDEX` as for the ibverbs fabric), or, in tests only,
//! the verbs model (a named test double; nothing selects it at run time
//! but a program that builds one on purpose).
//!
//! ```no_run
//! use splitrt_vys::consumer::ConsumerConfig;
//! use splitrt_vys::rdma_device::RdmaDevice;
//! let mut cfg = ConsumerConfig::without_multicast([7; 32]);
//! cfg.rdma = Some(RdmaDevice::hardware());
//! ```

use splitrt_runtime::fabric::rdma::device::{self, DeviceChoice};
#[cfg(feature = "test-doubles")]
use splitrt_runtime::fabric::rdma::model::ModelNetwork;
use splitrt_runtime::fabric::rdma::verbs::Verbs;
use std::sync::Arc;

type Open = dyn Fn(&str, u64) -> splitrt_runtime::Result<Box<dyn Verbs>> + Send + Sync;

/// How a vys producer or consumer opens its RDMA verbs.
#[derive(Clone)]
pub struct RdmaDevice {
    open: Arc<Open>,
    what: &'static str,
}

impl RdmaDevice {
    /// The RDMA device named by `SPLITRT_IBV_DEVICE` (default: the first),
    /// port `SPLITRT_IBV_PORT`, GID `SPLITRT_IBV_GID_INDEX`. Opening
    /// fails, saying what is missing, on a machine without one or in a
    /// build without the `ibverbs` feature.
    pub fn hardware() -> RdmaDevice {
        RdmaDevice {
            open: Arc::new(|_, memlock| {
                let choice = DeviceChoice::from_env(memlock)?;
                Ok(Box::new(device::open(&choice)?) as Box<dyn Verbs>)
            }),
            what: "the RDMA device",
        }
    }

    /// A device on the verbs model `net` (**test double**: producers and
    /// consumers must then live in one process). Only with the cargo
    /// feature `test-doubles`.
    #[cfg(feature = "test-doubles")]
    pub fn verbs_model(net: ModelNetwork) -> RdmaDevice {
        RdmaDevice {
            open: Arc::new(move |name, _| Ok(Box::new(net.device(name)) as Box<dyn Verbs>)),
            what: "the verbs model (test double)",
        }
    }

    /// Open it for `who` (a name for messages), which will register
    /// `memlock` bytes. The error says the device cannot be used and how
    /// to do without it.
    pub fn open(&self, who: &str, memlock: u64) -> std::io::Result<Box<dyn Verbs>> {
        (self.open)(who, memlock).map_err(|e| {
            std::io::Error::other(format!(
                "vys {who}: RDMA reads need {}: {e}; without RDMA (leave `rdma` unset) \
                 reads go to the producer's read server over the network",
                self.what
            ))
        })
    }
}

impl std::fmt::Debug for RdmaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)
    }
}
