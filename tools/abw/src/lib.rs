//! Available-bandwidth (ABw) estimator of the MBB testbed.
//!
//! Module map: [`method`] holds the pure estimation algorithms (yaz,
//! pathload, spruce) driven by [`observation`]s; [`client`] and [`server`]
//! run them over the network using [`sender`] (paced UDP), [`collector`]
//! (timestamped UDP receive) and [`protocol`] (TCP control channel);
//! [`record`] renders the JSON-lines output.

pub mod client;
pub mod clock;
pub mod collector;
pub mod error;
pub mod method;
pub mod observation;
pub mod packet;
pub mod protocol;
pub mod record;
pub mod rng;
pub mod sender;
pub mod server;

pub use error::{AbwError, Result};
