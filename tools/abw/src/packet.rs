//! Wire format of UDP probe packets.
//!
//! All probe sizes in this crate are **IP packet sizes** (IPv4 header 20 +
//! UDP header 8 + payload); rates are IP-level bit rates. The payload starts
//! with a fixed header, the rest is zero padding:
//!
//! ```text
//! 0  magic  u32 = "ABW1"      4  kind u8 (0 probe, 1 punch)   5..8 reserved
//! 8  session u64              16 stream u32      20 seq u32
//! 24 count u32 (packets in the stream)           28 send time, ns since
//!                                                    the Unix epoch (u64)
//! ```
//! All integers are big-endian.

/// IPv4 + UDP header bytes, added to the UDP payload to get the IP size.
pub const IP_UDP_OVERHEAD: usize = 28;
/// Bytes of the probe header inside the UDP payload.
pub const HEADER_LEN: usize = 36;
/// Smallest IP packet size a probe can have.
pub const MIN_PACKET_SIZE: usize = HEADER_LEN + IP_UDP_OVERHEAD;
/// Largest IP packet size accepted (jumbo frames are not expected).
pub const MAX_PACKET_SIZE: usize = 9000;
const MAGIC: u32 = u32::from_be_bytes(*b"ABW1");

/// Kind of a UDP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A measurement probe.
    Probe,
    /// A NAT hole-punching packet sent by a client before a reverse session.
    Punch,
}

/// Decoded probe header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub session: u64,
    pub stream: u32,
    pub seq: u32,
    pub count: u32,
    pub send_ns: u64,
}

impl Header {
    /// Write the header into the front of `buf` (which must be at least
    /// `HEADER_LEN` long); the rest of `buf` is left untouched.
    pub fn encode(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        buf[4] = match self.kind {
            Kind::Probe => 0,
            Kind::Punch => 1,
        };
        buf[5..8].fill(0);
        buf[8..16].copy_from_slice(&self.session.to_be_bytes());
        buf[16..20].copy_from_slice(&self.stream.to_be_bytes());
        buf[20..24].copy_from_slice(&self.seq.to_be_bytes());
        buf[24..28].copy_from_slice(&self.count.to_be_bytes());
        buf[28..36].copy_from_slice(&self.send_ns.to_be_bytes());
    }

    /// Decode a header; `None` for foreign or truncated datagrams.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        if buf.len() < HEADER_LEN {
            return None;
        }
        let u32at = |i: usize| u32::from_be_bytes(buf[i..i + 4].try_into().unwrap());
        let u64at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().unwrap());
        if u32at(0) != MAGIC {
            return None;
        }
        let kind = match buf[4] {
            0 => Kind::Probe,
            1 => Kind::Punch,
            _ => return None,
        };
        Some(Header {
            kind,
            session: u64at(8),
            stream: u32at(16),
            seq: u32at(20),
            count: u32at(24),
            send_ns: u64at(28),
        })
    }
}

/// UDP payload length for an IP packet size.
pub fn payload_len(ip_size: usize) -> usize {
    ip_size.saturating_sub(IP_UDP_OVERHEAD).max(HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let h = Header {
            kind: Kind::Probe,
            session: 0xdead_beef_0102_0304,
            stream: 7,
            seq: 49,
            count: 50,
            send_ns: 1_700_000_000_123_456_789,
        };
        let mut buf = vec![0u8; payload_len(1400)];
        h.encode(&mut buf);
        assert_eq!(buf.len(), 1372);
        assert_eq!(Header::decode(&buf), Some(h));
    }

    #[test]
    fn rejects_foreign() {
        assert_eq!(Header::decode(b"hello world, not a probe at all!!!!!!!"), None);
        assert_eq!(Header::decode(b"ABW1"), None);
    }
}
