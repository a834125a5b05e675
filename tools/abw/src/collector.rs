//! Receiving side of probe streams: a thread that reads the UDP socket,
//! timestamps every datagram (kernel `SO_TIMESTAMPNS` receive time, taken
//! when the packet enters the host's stack, falling back to the user-space
//! clock), filters by session, de-duplicates, and hands complete streams to
//! whoever waits for them. Reordered packets are kept in arrival order; the
//! estimators sort by sequence number when they need to.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::realtime_ns;
use crate::error::{AbwError, Result};
use crate::observation::{Observation, Rx};
use crate::packet::{Header, Kind, IP_UDP_OVERHEAD, MAX_PACKET_SIZE};

#[derive(Default)]
struct StreamRx {
    rx: Vec<Rx>,
    seen: Vec<bool>,
    size: usize,
    last_arrival: Option<Instant>,
}

#[derive(Default)]
struct State {
    session: u64,
    streams: HashMap<u32, StreamRx>,
    /// Streams with id <= this were already handed out; late packets of
    /// them are dropped.
    done_upto: Option<u32>,
    punch_from: Option<SocketAddr>,
    timestamps_kernel: u64,
    timestamps_user: u64,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    stop: AtomicBool,
}

/// Background receiver of probe packets on one UDP socket.
pub struct Collector {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Collector {
    /// Start a collector thread reading `sock` (a clone is taken).
    pub fn start(sock: &UdpSocket) -> Result<Collector> {
        let sock = sock
            .try_clone()
            .map_err(|e| AbwError::io("cloning UDP socket", e))?;
        enable_timestamps(&sock);
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| AbwError::io("setting UDP read timeout", e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let handle = std::thread::Builder::new()
            .name("abw-collector".into())
            .spawn(move || run(sock, sh))
            .map_err(|e| AbwError::io("spawning collector thread", e))?;
        Ok(Collector {
            shared,
            handle: Some(handle),
        })
    }

    /// Accept packets of `session` only, forgetting everything else.
    pub fn reset(&self, session: u64) {
        let mut st = self.lock();
        *st = State {
            session,
            ..State::default()
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait for `stream` until `expected` packets arrived, or no packet of
    /// it arrived for `grace` (counted from the call or the last arrival),
    /// or `hard` elapsed. Returns what arrived (possibly nothing).
    pub fn wait_stream(
        &self,
        stream: u32,
        expected: u32,
        grace: Duration,
        hard: Duration,
    ) -> Observation {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            let (have, last) = st
                .streams
                .get(&stream)
                .map(|s| (s.rx.len() as u32, s.last_arrival))
                .unwrap_or((0, None));
            let quiet_since = last.map_or(start, |l| l.max(start));
            if have >= expected
                || now.duration_since(quiet_since) >= grace
                || now.duration_since(start) >= hard
            {
                break;
            }
            let wait = grace
                .saturating_sub(now.duration_since(quiet_since))
                .min(hard.saturating_sub(now.duration_since(start)))
                .max(Duration::from_micros(200));
            st = self
                .shared
                .cond
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let s = st.streams.remove(&stream).unwrap_or_default();
        st.done_upto = Some(st.done_upto.map_or(stream, |d| d.max(stream)));
        let done = st.done_upto;
        st.streams.retain(|k, _| Some(*k) > done);
        Observation {
            sent: expected,
            size: s.size,
            rx: s.rx,
        }
    }

    /// Wait up to `timeout` for a punch packet of the current session;
    /// returns its source address.
    pub fn wait_punch(&self, timeout: Duration) -> Option<SocketAddr> {
        let start = Instant::now();
        let mut st = self.lock();
        loop {
            if let Some(a) = st.punch_from {
                return Some(a);
            }
            let el = start.elapsed();
            if el >= timeout {
                return None;
            }
            st = self
                .shared
                .cond
                .wait_timeout(st, timeout - el)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// (kernel, user-space) timestamp counts, for diagnostics.
    pub fn timestamp_sources(&self) -> (u64, u64) {
        let st = self.lock();
        (st.timestamps_kernel, st.timestamps_user)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(sock: UdpSocket, sh: Arc<Shared>) {
    let mut buf = vec![0u8; MAX_PACKET_SIZE];
    while !sh.stop.load(Ordering::SeqCst) {
        let (n, from, kts) = match recv_timestamped(&sock, &mut buf) {
            Ok(x) => x,
            Err(_) => continue, // timeout, ICMP errors: keep polling
        };
        let Some(h) = Header::decode(&buf[..n]) else {
            continue;
        };
        let mut st = sh.state.lock().unwrap_or_else(|p| p.into_inner());
        if h.session != st.session {
            continue;
        }
        match h.kind {
            Kind::Punch => {
                st.punch_from = Some(from);
            }
            Kind::Probe => {
                if st.done_upto.is_some_and(|d| h.stream <= d) || h.seq >= h.count {
                    continue;
                }
                let recv_ns = match kts {
                    Some(t) => {
                        st.timestamps_kernel += 1;
                        t
                    }
                    None => {
                        st.timestamps_user += 1;
                        realtime_ns()
                    }
                };
                let s = st.streams.entry(h.stream).or_default();
                if s.seen.len() < h.count as usize {
                    s.seen.resize(h.count as usize, false);
                }
                if s.seen[h.seq as usize] {
                    continue; // duplicate
                }
                s.seen[h.seq as usize] = true;
                s.size = n + IP_UDP_OVERHEAD;
                s.last_arrival = Some(Instant::now());
                s.rx.push(Rx {
                    seq: h.seq,
                    send_ns: h.send_ns,
                    recv_ns,
                });
            }
        }
        drop(st);
        sh.cond.notify_all();
    }
}

/// Ask the kernel for receive timestamps and a large receive buffer.
fn enable_timestamps(sock: &UdpSocket) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = sock.as_raw_fd();
        let one: libc::c_int = 1;
        let buf: libc::c_int = 4 << 20;
        // SAFETY: valid fd and pointers to c_int of the given size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                &one as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            // SO_RCVBUFFORCE works as root past rmem_max; else fall back.
            if libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &buf as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) != 0
            {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    &buf as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
}

/// `recvmsg` returning (length, source, kernel receive time in ns).
#[cfg(target_os = "linux")]
fn recv_timestamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<u64>)> {
    use std::os::fd::AsRawFd;
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; all pointers reference live buffers of
    // the stated sizes for the duration of the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut name as *mut _ as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut ts = None;
    // SAFETY: iterating the control messages the kernel just wrote.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                ts = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = sockaddr_to_std(&name).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "unknown address family")
    })?;
    Ok((n as usize, from, ts))
}

#[cfg(target_os = "linux")]
fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: family says this storage holds a sockaddr_in.
            let a = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family says this storage holds a sockaddr_in6.
            let a = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(not(target_os = "linux"))]
fn recv_timestamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<u64>)> {
    let (n, a) = sock.recv_from(buf)?;
    Ok((n, a, None))
}
