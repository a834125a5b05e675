//! Paced transmission of one probe stream over UDP.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::clock::{pace_until, realtime_ns};
use crate::error::{AbwError, Result};
use crate::method::ProbeSpec;
use crate::packet::{payload_len, Header, Kind};

/// Outcome of sending a stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sent {
    /// Packets handed to the kernel successfully.
    pub packets: u32,
    /// IP bytes of those packets.
    pub bytes: u64,
}

/// Send `spec` on `sock` (to `dest`, or to the connected peer when `None`),
/// pacing each packet to its offset from the start. Send timestamps are
/// taken right before each `send` call and written into the packet.
pub fn send_stream(
    sock: &UdpSocket,
    dest: Option<SocketAddr>,
    session: u64,
    stream: u32,
    spec: &ProbeSpec,
    spin: Duration,
) -> Result<Sent> {
    let mut buf = vec![0u8; payload_len(spec.size)];
    let count = spec.offsets_ns.len() as u32;
    let start = Instant::now() + Duration::from_micros(50);
    let mut sent = Sent::default();
    let mut errors = 0u32;
    let mut last_err = None;
    for (seq, off) in spec.offsets_ns.iter().enumerate() {
        pace_until(start + Duration::from_nanos(*off), spin);
        let h = Header {
            kind: Kind::Probe,
            session,
            stream,
            seq: seq as u32,
            count,
            send_ns: realtime_ns(),
        };
        h.encode(&mut buf);
        let r = match dest {
            Some(d) => sock.send_to(&buf, d),
            None => sock.send(&buf),
        };
        match r {
            Ok(_) => {
                sent.packets += 1;
                sent.bytes += spec.size as u64;
            }
            // A full device queue (ENOBUFS) or an ICMP error from an
            // earlier datagram is a lost probe, not a failed stream.
            Err(e) => {
                errors += 1;
                last_err = Some(e);
            }
        }
    }
    if sent.packets == 0 {
        if let Some(e) = last_err {
            return Err(AbwError::io(
                format!("sending probe stream ({errors} send errors)"),
                e,
            ));
        }
    }
    Ok(sent)
}

/// Send a few NAT hole-punching packets on the connected socket `sock`.
pub fn send_punch(sock: &UdpSocket, session: u64, n: u32) -> Result<()> {
    let mut buf = vec![0u8; payload_len(0)];
    for i in 0..n {
        let h = Header {
            kind: Kind::Punch,
            session,
            stream: 0,
            seq: i,
            count: n,
            send_ns: realtime_ns(),
        };
        h.encode(&mut buf);
        sock.send(&buf)
            .map_err(|e| AbwError::io("sending NAT punch packet", e))?;
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
