//! Link, network and transport headers of one frame (the twin of
//! `orchestrator/analysis/packets.py`: lengths come from the IP header, never from the
//! captured bytes, since captures are headers only).

pub const TCP: u8 = 6;
const UDP: u8 = 17;
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

const VLAN: [u16; 3] = [0x8100, 0x88A8, 0x9100];
const IPV4: u16 = 0x0800;
const IPV6: u16 = 0x86DD;

/// An IP address as its raw 4 or 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    pub len: u8,
    pub bytes: [u8; 16],
}

impl Addr {
    fn from(b: &[u8]) -> Addr {
        let mut bytes = [0u8; 16];
        bytes[..b.len()].copy_from_slice(b);
        Addr {
            len: b.len() as u8,
            bytes,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// One IP packet's headers; `payload` may be negative for a nonsensical later fragment,
/// exactly as the reference computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub ts_ns: i64,
    pub src: Addr,
    pub dst: Addr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub payload: i64,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
}

fn u16be(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

fn u32be(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

fn network_offset(d: &[u8], linktype: u32) -> Option<usize> {
    let end = d.len();
    let (ethertype, l3) = match linktype {
        0 | 108 => return Some(4),                   // BSD / OpenBSD loopback
        12 | 14 | 101 | 228 | 229 => return Some(0), // raw IP
        1 => {
            let mut l3 = 14;
            if l3 > end {
                return None;
            }
            let mut ethertype = u16be(d, 12);
            while VLAN.contains(&ethertype) && l3 + 4 <= end {
                ethertype = u16be(d, l3 + 2);
                l3 += 4;
            }
            (ethertype, l3)
        }
        113 => {
            if 16 > end {
                return None;
            }
            (u16be(d, 14), 16)
        }
        276 => {
            if 20 > end {
                return None;
            }
            (u16be(d, 0), 20)
        }
        _ => return None,
    };
    (ethertype == IPV4 || ethertype == IPV6).then_some(l3)
}

/// Decode a frame's bytes; None if it carries no usable IP.
pub fn decode(d: &[u8], ts_ns: i64, linktype: u32, orig_len: u32) -> Option<Packet> {
    let end = d.len();
    let l3 = network_offset(d, linktype)?;
    if l3 + 20 > end {
        return None;
    }
    let (src, dst, mut proto, mut l4, mut l4_len);
    match d[l3] >> 4 {
        4 => {
            let ihl = usize::from(d[l3] & 0x0F) * 4;
            let mut t = i64::from(u16be(d, l3 + 2));
            let frag = u16be(d, l3 + 6);
            proto = d[l3 + 9];
            if t == 0 {
                t = i64::from(orig_len) - l3 as i64; // TSO super-packet
            }
            src = Addr::from(&d[l3 + 12..l3 + 16]);
            dst = Addr::from(&d[l3 + 16..l3 + 20]);
            l4 = l3 + ihl;
            l4_len = t - ihl as i64;
            if frag & 0x1FFF != 0 {
                let p = Packet {
                    ts_ns,
                    src,
                    dst,
                    proto,
                    sport: 0,
                    dport: 0,
                    payload: l4_len,
                    seq: 0,
                    ack: 0,
                    flags: 0,
                    window: 0,
                };
                return Some(p);
            }
        }
        6 => {
            if l3 + 40 > end {
                return None;
            }
            let payload_len = i64::from(u16be(d, l3 + 4));
            proto = d[l3 + 6];
            src = Addr::from(&d[l3 + 8..l3 + 24]);
            dst = Addr::from(&d[l3 + 24..l3 + 40]);
            l4 = l3 + 40;
            l4_len = payload_len;
            while matches!(proto, 0 | 43 | 60 | 44) && l4 + 8 <= end {
                let ext = if proto == 44 {
                    8
                } else {
                    (usize::from(d[l4 + 1]) + 1) * 8
                };
                proto = d[l4];
                l4 += ext;
                l4_len -= ext as i64;
            }
        }
        _ => return None,
    }
    let mut p = Packet {
        ts_ns,
        src,
        dst,
        proto,
        sport: 0,
        dport: 0,
        payload: l4_len.max(0),
        seq: 0,
        ack: 0,
        flags: 0,
        window: 0,
    };
    if proto == TCP && l4 + 20 <= end {
        p.sport = u16be(d, l4);
        p.dport = u16be(d, l4 + 2);
        p.seq = u32be(d, l4 + 4);
        p.ack = u32be(d, l4 + 8);
        p.flags = d[l4 + 13];
        p.window = u16be(d, l4 + 14);
        p.payload = (l4_len - i64::from(d[l4 + 12] >> 4) * 4).max(0);
    } else if proto == UDP && l4 + 8 <= end {
        p.sport = u16be(d, l4);
        p.dport = u16be(d, l4 + 2);
        p.payload = (l4_len - 8).max(0);
    }
    Some(p)
}
