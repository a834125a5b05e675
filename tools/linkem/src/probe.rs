//! Small traffic tools for the integration tests and the bench: a paced
//! UDP flood and a binned sink, a TCP transfer server and client, and a UDP
//! echo with a pinger.
//!
//! They live in the crate so that the tests need nothing but the `linkem`
//! binary (no iperf3 on a fresh machine). Every loop is bounded in time:
//! each tool stops by itself after its `duration`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::clock::monotonic_ns;

/// IPv4 (20) + UDP (8) header bytes: the sink reports IP bytes so that
/// its figures compare with the emulator's rates, which count IP packets.
pub const UDP_IPV4_OVERHEAD: usize = 28;

/// Sink report.
#[derive(Debug, Clone, Serialize)]
pub struct SinkReport {
    pub bin_ms: u64,
    /// CLOCK_MONOTONIC of the start of bin 0.
    pub origin_monotonic_ns: u64,
    /// IP bytes received per bin.
    pub bins_ip_bytes: Vec<u64>,
    pub bins_packets: Vec<u64>,
    pub packets: u64,
    pub ip_bytes: u64,
}

/// Receives UDP on `listen` for `duration` (or until `quiet` passes with
/// nothing after the first packet), binning IP bytes by `bin_ms` from
/// `origin` (CLOCK_MONOTONIC ns) or from the first packet.
///
/// Packets are binned by their kernel receive timestamp (SO_TIMESTAMPNS),
/// so a sink that is scheduled late on a busy machine still bins each
/// packet where it arrived.
pub fn sink(
    listen: SocketAddr,
    duration: Duration,
    bin_ms: u64,
    origin: Option<u64>,
    quiet: Duration,
) -> io::Result<SinkReport> {
    let sock = UdpSocket::bind(listen)?;
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    enable_timestamps(&sock)?;
    // CLOCK_REALTIME (the timestamps' clock) minus CLOCK_MONOTONIC.
    let real_minus_mono = realtime_ns() as i128 - monotonic_ns() as i128;
    let start = Instant::now();
    let mut origin = origin;
    let mut last_rx = None::<Instant>;
    let mut r = SinkReport {
        bin_ms,
        origin_monotonic_ns: 0,
        bins_ip_bytes: vec![],
        bins_packets: vec![],
        packets: 0,
        ip_bytes: 0,
    };
    let mut buf = vec![0u8; 65_536];
    while start.elapsed() < duration {
        if last_rx.is_some_and(|t| t.elapsed() > quiet) {
            break;
        }
        match recv_timestamped(&sock, &mut buf) {
            Ok((n, stamp)) => {
                let t = match stamp {
                    Some(real) => (real as i128 - real_minus_mono).max(0) as u64,
                    None => monotonic_ns(),
                };
                let o = *origin.get_or_insert(t);
                last_rx = Some(Instant::now());
                if t < o {
                    continue;
                }
                let bin = ((t - o) / (bin_ms * 1_000_000)) as usize;
                if bin >= r.bins_ip_bytes.len() {
                    r.bins_ip_bytes.resize(bin + 1, 0);
                    r.bins_packets.resize(bin + 1, 0);
                }
                let ip = (n + UDP_IPV4_OVERHEAD) as u64;
                r.bins_ip_bytes[bin] += ip;
                r.bins_packets[bin] += 1;
                r.packets += 1;
                r.ip_bytes += ip;
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    r.origin_monotonic_ns = origin.unwrap_or(0);
    Ok(r)
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn enable_timestamps(sock: &UdpSocket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a valid pointer.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One datagram and its kernel receive time (CLOCK_REALTIME ns), if given.
fn recv_timestamped(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive
    // the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes valid buffers owned by this frame.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: CMSG_* walk the control buffer the kernel just filled, within
    // msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

/// Flood report.
#[derive(Debug, Clone, Serialize)]
pub struct FloodReport {
    pub packets: u64,
    pub ip_bytes: u64,
    pub send_errors: u64,
}

/// Sends UDP datagrams of `payload` bytes to `to` for `duration`, paced at
/// `pps` packets per second (as fast as possible when `None`).
pub fn flood(to: SocketAddr, payload: usize, pps: Option<f64>, duration: Duration) -> io::Result<FloodReport> {
    let sock = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
    sock.connect(to)?;
    let buf = vec![0x5au8; payload];
    let start = Instant::now();
    let mut r = FloodReport {
        packets: 0,
        ip_bytes: 0,
        send_errors: 0,
    };
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        if let Some(pps) = pps {
            let due = (elapsed.as_secs_f64() * pps) as u64 + 1;
            if r.packets + r.send_errors >= due {
                let next = Duration::from_secs_f64((r.packets + r.send_errors) as f64 / pps);
                let gap = next.saturating_sub(start.elapsed());
                if gap > Duration::from_micros(50) {
                    std::thread::sleep(gap);
                }
                continue;
            }
        }
        match sock.send(&buf) {
            Ok(_) => {
                r.packets += 1;
                r.ip_bytes += (payload + UDP_IPV4_OVERHEAD) as u64;
            }
            // ENOBUFS / ECONNREFUSED (ICMP from a closed port): keep going.
            Err(_) => r.send_errors += 1,
        }
    }
    Ok(r)
}

/// Serves TCP transfers on `listen` for `duration`: a client sends the size
/// as 8 bytes big-endian and receives that many bytes, then the server
/// closes.
pub fn tcp_serve(listen: SocketAddr, duration: Duration) -> io::Result<()> {
    let l = TcpListener::bind(listen)?;
    l.set_nonblocking(true)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        match l.accept() {
            Ok((mut s, _)) => {
                std::thread::spawn(move || {
                    let _ = serve_one(&mut s);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve_one(s: &mut TcpStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut size = [0u8; 8];
    s.read_exact(&mut size)?;
    let mut left = u64::from_be_bytes(size);
    let chunk = vec![0xa5u8; 64 * 1024];
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    s.flush()
}

/// One transfer of `fetch`.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    pub bytes: u64,
    pub seconds: f64,
    pub goodput_bps: f64,
}

/// Downloads `size` bytes `count` times back to back from a `tcp_serve`
/// server, a new connection each time (like HTTP/1.0 downloads); the time
/// of each counts from the connect call to the last byte.
pub fn fetch(to: SocketAddr, size: u64, count: usize, timeout: Duration) -> io::Result<Vec<Transfer>> {
    let mut out = Vec::with_capacity(count);
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..count {
        let t0 = Instant::now();
        let mut s = TcpStream::connect_timeout(&to, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(&size.to_be_bytes())?;
        let mut got = 0u64;
        while got < size {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        let secs = t0.elapsed().as_secs_f64();
        out.push(Transfer {
            bytes: got,
            seconds: secs,
            goodput_bps: got as f64 * 8.0 / secs,
        });
    }
    Ok(out)
}

/// Echoes UDP datagrams back to their sender for `duration`.
pub fn echo(listen: SocketAddr, duration: Duration) -> io::Result<u64> {
    let sock = UdpSocket::bind(listen)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let start = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut n_echoed = 0;
    while start.elapsed() < duration {
        match sock.recv_from(&mut buf) {
            Ok((n, peer)) => {
                if sock.send_to(&buf[..n], peer).is_ok() {
                    n_echoed += 1;
                }
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n_echoed)
}

/// Ping report; round-trip times in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct PingReport {
    pub sent: usize,
    pub lost: usize,
    pub min_us: f64,
    pub median_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
}

/// Sends `count` datagrams of `payload` bytes to an `echo` server, one
/// every `interval`, each waiting up to 1 s for its echo.
pub fn ping(to: SocketAddr, payload: usize, count: usize, interval: Duration) -> io::Result<PingReport> {
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    sock.connect(to)?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut buf = vec![0u8; payload.max(8)];
    let mut rx = vec![0u8; 65_536];
    let mut rtts = Vec::with_capacity(count);
    for seq in 0..count as u64 {
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        let t0 = Instant::now();
        sock.send(&buf)?;
        loop {
            match sock.recv(&mut rx) {
                Ok(n) if n >= 8 && rx[..8] == seq.to_be_bytes() => {
                    rtts.push(t0.elapsed().as_secs_f64() * 1e6);
                    break;
                }
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        std::thread::sleep(interval);
    }
    rtts.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        if rtts.is_empty() {
            f64::NAN
        } else {
            rtts[((rtts.len() - 1) as f64 * p).round() as usize]
        }
    };
    Ok(PingReport {
        sent: count,
        lost: count - rtts.len(),
        min_us: q(0.0),
        median_us: q(0.5),
        p90_us: q(0.9),
        p99_us: q(0.99),
    })
}

/// Asks a state endpoint (`linkem run --state-udp`, or `--state-http`
/// when `http`) for the link state; returns the JSON document.
pub fn query_state(to: SocketAddr, http: bool, timeout: Duration) -> io::Result<String> {
    if http {
        let mut s = TcpStream::connect_timeout(&to, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(b"GET /state HTTP/1.0\r\nHost: linkem\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        return match text.split_once("\r\n\r\n") {
            Some((head, body)) if head.starts_with("HTTP/1.0 200") => Ok(body.to_owned()),
            _ => Err(io::Error::new(io::ErrorKind::InvalidData, "not an HTTP 200 answer")),
        };
    }
    let sock = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" })?;
    sock.connect(to)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.send(b"state")?;
    let mut buf = vec![0u8; 65_536];
    let n = sock.recv(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}
