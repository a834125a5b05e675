//! pcap and pcapng files read front to back, one frame at a time (the streaming twin of
//! `orchestrator/analysis/pcap.py`, whose checks and messages it keeps word for word).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

const PCAP_HEADER: u64 = 24;
const RECORD_HEADER: u64 = 16;
/// Largest record a sane capture holds (see `_MAX_RECORD` in pcap.py).
const MAX_RECORD: u32 = 1 << 20;
/// Largest pcapng block read whole (see `_MAX_BLOCK` in pcap.py): longer is damage.
const MAX_BLOCK: u64 = 2 * MAX_RECORD as u64;
/// Timestamps are clamped to this many nanoseconds either side of 1970 (see `_MAX_TS_NS`
/// in pcap.py), so no difference of two of them overflows an i64.
const MAX_TS_NS: i128 = (1 << 62) - 1;
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_BOM: u32 = 0x1A2B_3C4D;
const OPT_TSRESOL: u16 = 9;
const OPT_TSOFFSET: u16 = 14;

/// Where and why a capture cannot be read (further).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError {
    pub message: String,
    pub offset: u64,
    pub packets_read: u64,
}

/// Why a file could not be analysed at all.
#[derive(Debug)]
pub enum OpenError {
    /// Not a capture: the reference raises this even when it reads leniently.
    NotACapture(CaptureError),
    Io(io::Error),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Pcap,
    Pcapng,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pcap => "pcap",
            Format::Pcapng => "pcapng",
        }
    }
}

/// One frame; its bytes are [`Reader::frame_data`] (empty when `caplen` < 0, which a
/// short simple packet block gives, as in the reference).
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub ts_ns: i64,
    pub linktype: u32,
    pub caplen: i64,
    pub orig_len: u32,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    snaplen: u32,
    units_per_s: u128, // saturated: any resolution finer than u128 gives 0 ns, as in Python
    offset_s: i64,
}

#[derive(Clone, Copy)]
enum Order {
    Little,
    Big,
}

fn u16_at(order: Order, b: &[u8], at: usize) -> u16 {
    let v = [b[at], b[at + 1]];
    match order {
        Order::Little => u16::from_le_bytes(v),
        Order::Big => u16::from_be_bytes(v),
    }
}

fn u32_at(order: Order, b: &[u8], at: usize) -> u32 {
    let v = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    match order {
        Order::Little => u32::from_le_bytes(v),
        Order::Big => u32::from_be_bytes(v),
    }
}

fn i64_at(order: Order, b: &[u8], at: usize) -> i64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    match order {
        Order::Little => i64::from_le_bytes(v),
        Order::Big => i64::from_be_bytes(v),
    }
}

/// A capture file being read.
pub struct Reader {
    file: BufReader<File>,
    pub format: Format,
    /// The first interface's snapshot length for pcap (0 for pcapng, as the reference).
    pub snaplen: u32,
    end: u64,
    offset: u64,
    n: u64,
    // pcap
    order: Order,
    scale: i64,
    linktype: u32,
    // pcapng
    interfaces: Vec<Interface>,
    buf: Vec<u8>,
    data_start: usize,
    data_len: usize,
    failed: bool,
}

impl Reader {
    pub fn open(path: &Path) -> Result<Reader, OpenError> {
        let file = File::open(path)?;
        let end = file.metadata()?.len();
        let mut file = BufReader::with_capacity(1 << 18, file);
        let mut head = Vec::with_capacity(24);
        (&mut file).take(PCAP_HEADER).read_to_end(&mut head)?;
        let magic = (head.len() >= 4).then(|| u32_at(Order::Little, &head, 0));
        let pcap = magic.and_then(|m| match m {
            0xA1B2_C3D4 => Some((Order::Little, 1000)),
            0xD4C3_B2A1 => Some((Order::Big, 1000)),
            0xA1B2_3C4D => Some((Order::Little, 1)),
            0x4D3C_B2A1 => Some((Order::Big, 1)),
            _ => None,
        });
        let mut reader = Reader {
            file,
            format: Format::Pcap,
            snaplen: 0,
            end,
            offset: 0,
            n: 0,
            order: Order::Little,
            scale: 1000,
            linktype: 0,
            interfaces: Vec::new(),
            buf: Vec::with_capacity(1 << 12),
            data_start: 0,
            data_len: 0,
            failed: false,
        };
        if let Some((order, scale)) = pcap {
            reader.order = order;
            reader.scale = scale;
            if head.len() as u64 == PCAP_HEADER {
                reader.snaplen = u32_at(order, &head, 16);
                // upper bits carry the FCS length (pcap draft section 4)
                reader.linktype = u32_at(order, &head, 20) & 0x0FFF_FFFF;
                reader.offset = PCAP_HEADER;
            }
            return Ok(reader);
        }
        if magic == Some(PCAPNG_SHB) {
            reader.format = Format::Pcapng;
            reader.file.rewind()?;
            return Ok(reader);
        }
        let start: String = head.iter().take(4).map(|b| format!("{b:02x}")).collect();
        let start = if start.is_empty() {
            "nothing".to_string()
        } else {
            start
        };
        Err(OpenError::NotACapture(CaptureError {
            message: format!(
                "not a pcap or pcapng file (starts with {start}); write captures with tcpdump -w \
                 or dumpcap"
            ),
            offset: 0,
            packets_read: 0,
        }))
    }

    /// The bytes of the frame last returned by [`Reader::next_frame`].
    pub fn frame_data(&self) -> &[u8] {
        &self.buf[self.data_start..self.data_start + self.data_len]
    }

    /// The next frame, None at the end, or where and why the file is damaged (after
    /// which it returns None).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, CaptureError> {
        if self.failed {
            return Ok(None);
        }
        let got = match self.format {
            Format::Pcap => self.next_pcap(),
            Format::Pcapng => self.next_pcapng(),
        };
        match got {
            Ok(Some(f)) => {
                self.n += 1;
                Ok(Some(f))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    fn truncated(&self, what: &str, need: u64) -> CaptureError {
        let (offset, n, end) = (self.offset, self.n, self.end);
        CaptureError {
            message: format!(
                "capture truncated at byte {offset} of {end}: {what} of packet {} needs {need} \
                 bytes, {} left. The file was cut short (a capture still being written, or an \
                 interrupted copy); read it with strict=False to keep the {n} packets before \
                 the damage",
                n + 1,
                end - offset
            ),
            offset,
            packets_read: n,
        }
    }

    fn damaged(&self, message: String) -> CaptureError {
        CaptureError {
            message,
            offset: self.offset,
            packets_read: self.n,
        }
    }

    fn io_damage(&self, e: io::Error) -> CaptureError {
        self.damaged(format!("capture unreadable at byte {}: {e}", self.offset))
    }

    fn read_into_buf(&mut self, n: usize) -> Result<(), CaptureError> {
        self.buf.resize(n, 0);
        let r = self.file.read_exact(&mut self.buf);
        r.map_err(|e| self.io_damage(e))
    }

    fn next_pcap(&mut self) -> Result<Option<Frame>, CaptureError> {
        let end = self.end;
        if self.offset == 0 {
            return Err(self.damaged(format!(
                "pcap file header truncated: {end} of {PCAP_HEADER} bytes; the file is empty or \
                 was cut before the first packet"
            )));
        }
        if self.offset >= end {
            return Ok(None);
        }
        if self.offset + RECORD_HEADER > end {
            return Err(self.truncated("the record header", RECORD_HEADER));
        }
        let mut h = [0u8; 16];
        let r = self.file.read_exact(&mut h);
        r.map_err(|e| self.io_damage(e))?;
        let o = self.order;
        let (sec, frac, caplen, orig_len) = (
            u32_at(o, &h, 0),
            u32_at(o, &h, 4),
            u32_at(o, &h, 8),
            u32_at(o, &h, 12),
        );
        if caplen > MAX_RECORD {
            let n = self.n;
            return Err(self.damaged(format!(
                "capture damaged at byte {}: packet {} claims {caplen} bytes, more than any \
                 capture holds; read it with strict=False to keep the {n} packets before the \
                 damage",
                self.offset,
                n + 1
            )));
        }
        let start = self.offset + RECORD_HEADER;
        if start + u64::from(caplen) > end {
            return Err(self.truncated("the record", RECORD_HEADER + u64::from(caplen)));
        }
        self.read_into_buf(caplen as usize)?;
        self.data_start = 0;
        self.data_len = caplen as usize;
        self.offset = start + u64::from(caplen);
        let ts_ns = i64::from(sec) * 1_000_000_000 + i64::from(frac) * self.scale;
        Ok(Some(Frame {
            ts_ns,
            linktype: self.linktype,
            caplen: i64::from(caplen),
            orig_len,
        }))
    }

    /// The rest of a pcapng block after its 12-byte header, with `body4` (the body's
    /// first four bytes, already read) in front: `buf[0]` is the block body. When the
    /// reference would read past a short block (`min_body` bytes of fields), the bytes
    /// after it are peeked as Python's `unpack_from` on the whole file would see them.
    fn read_block(
        &mut self,
        body4: [u8; 4],
        length: u64,
        min_body: u64,
    ) -> Result<(), CaptureError> {
        let rest = length - 12;
        self.buf.clear();
        self.buf.extend_from_slice(&body4);
        self.buf.resize(4 + rest as usize, 0);
        let r = self.file.read_exact(&mut self.buf[4..]);
        r.map_err(|e| self.io_damage(e))?;
        let have = length - 8;
        if min_body > have {
            let extra = (min_body - have).min(self.end - (self.offset + length));
            let at = self.buf.len();
            self.buf.resize(at + extra as usize, 0);
            let r = self.file.read_exact(&mut self.buf[at..]);
            r.map_err(|e| self.io_damage(e))?;
            let r = self.file.seek_relative(-(extra as i64));
            r.map_err(|e| self.io_damage(e))?;
        }
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<Frame>, CaptureError> {
        loop {
            let end = self.end;
            if self.offset >= end {
                return Ok(None);
            }
            if self.offset + 12 > end {
                return Err(self.truncated("the block header", 12));
            }
            let mut h = [0u8; 12];
            let r = self.file.read_exact(&mut h);
            r.map_err(|e| self.io_damage(e))?;
            let btype = u32_at(self.order, &h, 0);
            if btype == PCAPNG_SHB {
                self.order = match u32_at(Order::Little, &h, 8) {
                    PCAPNG_BOM => Order::Little,
                    0x4D3C_2B1A => Order::Big,
                    _ => {
                        return Err(self.damaged(format!(
                            "pcapng section at byte {} has no valid byte-order magic; the file \
                             is damaged after {} packets (strict=False keeps them)",
                            self.offset, self.n
                        )))
                    }
                };
                self.interfaces.clear(); // interface ids are per section
            }
            let length = u64::from(u32_at(self.order, &h, 4));
            if length < 12 || length % 4 != 0 {
                let n = self.n;
                return Err(self.damaged(format!(
                    "capture damaged at byte {}: pcapng block length {length} is not a multiple \
                     of 4 of at least 12; read it with strict=False to keep the {n} packets \
                     before the damage",
                    self.offset
                )));
            }
            if length > MAX_BLOCK && matches!(btype, 1 | 2 | 3 | 6) {
                let n = self.n;
                return Err(self.damaged(format!(
                    "capture damaged at byte {}: pcapng block length {length} is more than any \
                     capture holds; read it with strict=False to keep the {n} packets before \
                     the damage",
                    self.offset
                )));
            }
            if self.offset + length > end {
                return Err(self.truncated("the pcapng block", length));
            }
            let body4 = [h[8], h[9], h[10], h[11]];
            let block_end = (length - 12) as usize; // relative to the body
            let o = self.order;
            let mut frame = None;
            match btype {
                1 => {
                    self.read_block(body4, length, length - 12 + 8)?;
                    let iface = self.interface(block_end);
                    self.interfaces.push(iface);
                }
                6 | 2 => {
                    self.read_block(body4, length, 20)?;
                    if self.buf.len() < 20 {
                        return Err(self.damaged(format!(
                            "capture damaged at byte {}: packet {} is cut inside its block \
                             header",
                            self.offset,
                            self.n + 1
                        )));
                    }
                    let b = &self.buf;
                    let (iface_id, hi, lo, caplen, orig_len) = if btype == 6 {
                        (
                            u32_at(o, b, 0),
                            u32_at(o, b, 4),
                            u32_at(o, b, 8),
                            u32_at(o, b, 12),
                            u32_at(o, b, 16),
                        )
                    } else {
                        (
                            u32::from(u16_at(o, b, 0)),
                            u32_at(o, b, 4),
                            u32_at(o, b, 8),
                            u32_at(o, b, 12),
                            u32_at(o, b, 16),
                        )
                    };
                    if iface_id as usize >= self.interfaces.len()
                        || 20 + u64::from(caplen) > block_end as u64
                    {
                        let n = self.n;
                        return Err(self.damaged(format!(
                            "capture damaged at byte {}: packet {} names interface {iface_id} of \
                             {} or overruns its block; strict=False keeps the {n} packets before \
                             the damage",
                            self.offset,
                            n + 1,
                            self.interfaces.len()
                        )));
                    }
                    let iface = self.interfaces[iface_id as usize];
                    let ts = (u64::from(hi) << 32) | u64::from(lo);
                    self.data_start = 20;
                    self.data_len = caplen as usize;
                    frame = Some(Frame {
                        ts_ns: ts_ns(ts, &iface),
                        linktype: iface.linktype,
                        caplen: i64::from(caplen),
                        orig_len,
                    });
                }
                3 => {
                    if self.interfaces.is_empty() {
                        return Err(self.damaged(format!(
                            "capture damaged at byte {}: a simple packet block before any \
                             interface description",
                            self.offset
                        )));
                    }
                    self.read_block(body4, length, 4)?;
                    let orig_len = u32_at(o, &self.buf, 0);
                    let iface = self.interfaces[0];
                    let mut caplen = i64::from(orig_len).min(block_end as i64 - 4);
                    if iface.snaplen != 0 {
                        caplen = caplen.min(i64::from(iface.snaplen));
                    }
                    self.data_start = 4;
                    self.data_len = caplen.max(0) as usize;
                    frame = Some(Frame {
                        ts_ns: 0,
                        linktype: iface.linktype,
                        caplen,
                        orig_len,
                    });
                }
                _ => {
                    let r = self.file.seek_relative(length as i64 - 12);
                    r.map_err(|e| self.io_damage(e))?;
                }
            }
            self.offset += length;
            if frame.is_some() {
                return Ok(frame);
            }
        }
    }

    /// An interface description block's link type, snapshot length and timestamp
    /// resolution and offset (if_tsresol, if_tsoffset).
    fn interface(&self, block_end: usize) -> Interface {
        let (o, b) = (self.order, &self.buf);
        let get = |at: usize, n: usize| b.len() >= at + n;
        if !get(0, 8) {
            return Interface {
                linktype: 0,
                snaplen: 0,
                units_per_s: 1_000_000,
                offset_s: 0,
            };
        }
        let linktype = u32::from(u16_at(o, b, 0));
        let snaplen = u32_at(o, b, 4);
        let (mut units, mut offset_s) = (1_000_000u128, 0i64);
        let mut opt = 8usize;
        while opt + 4 <= block_end {
            let (code, length) = (u16_at(o, b, opt), usize::from(u16_at(o, b, opt + 2)));
            if code == 0 {
                break;
            }
            let value = opt + 4;
            if code == OPT_TSRESOL && length >= 1 && get(value, 1) {
                let res = u32::from(b[value]);
                units = if res & 0x80 != 0 {
                    1u128.checked_shl(res & 0x7F).unwrap_or(u128::MAX)
                } else {
                    10u128.checked_pow(res).unwrap_or(u128::MAX)
                };
            } else if code == OPT_TSOFFSET && length >= 8 && get(value, 8) {
                offset_s = i64_at(o, b, value);
            }
            opt = value + length.div_ceil(4) * 4;
        }
        Interface {
            linktype,
            snaplen,
            units_per_s: units,
            offset_s,
        }
    }
}

fn ts_ns(ts: u64, iface: &Interface) -> i64 {
    let units = iface.units_per_s;
    let ns: i128 = if units == 1_000_000_000 {
        i128::from(ts)
    } else {
        (u128::from(ts) * 1_000_000_000 / units) as i128
    };
    let total = ns + i128::from(iface.offset_s) * 1_000_000_000;
    total.clamp(-MAX_TS_NS, MAX_TS_NS) as i64
}
