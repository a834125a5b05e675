//! TUN devices: the adapter between the kernel's routing and the emulator.
//!
//! A packet the kernel routes out of a TUN device is read here; a packet
//! written here enters the kernel as if received on that device and is
//! routed again (so one TUN per direction suffices: read, delay, write back).
//! The device may already exist (`ip tuntap add mode tun name X`, the robust
//! choice: routes survive a restart of linkem) or is created on open.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::Error;

/// `_IOW('T', 202, int)` from linux/if_tun.h.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` restricted to the name and the flags member of its union
/// (the kernel reads 40 bytes on x86_64 and aarch64).
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl IfReqFlags {
    fn new(name: &str) -> io::Result<Self> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "interface names have 1 to 15 bytes",
            ));
        }
        let mut r = Self {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        r.name[..bytes.len()].copy_from_slice(bytes);
        Ok(r)
    }
}

/// An open TUN device in non-blocking mode.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Opens (creating if needed) TUN device `name` without packet
    /// information headers, and sets it up.
    pub fn open(name: &str) -> Result<Self, Error> {
        let err = |source| Error::Tun {
            name: name.to_owned(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(err)?;
        let mut req = IfReqFlags::new(name).map_err(err)?;
        req.flags = IFF_TUN | IFF_NO_PI;
        // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `req`
        // matches in size and layout for the members the kernel uses.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if rc < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        set_up(name).map_err(err)?;
        Ok(Self {
            file,
            name: name.to_owned(),
        })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one packet; `WouldBlock` when none is waiting.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }

    /// Writes one packet (it enters the kernel on this device).
    pub fn send(&mut self, packet: &[u8]) -> io::Result<usize> {
        self.file.write(packet)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Sets IFF_UP on interface `name`.
fn set_up(name: &str) -> io::Result<()> {
    // SAFETY: plain socket creation; the descriptor is closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut req = IfReqFlags::new(name)?;
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write ifr_flags of a
    // struct ifreq, which `req` lays out identically.
    let result = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            Err(io::Error::last_os_error())
        } else {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS as _, &mut req) < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `sock` is ours and open.
    unsafe { libc::close(sock) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked() {
        assert!(IfReqFlags::new("lkup").is_ok());
        assert!(IfReqFlags::new("").is_err());
        assert!(IfReqFlags::new("a-name-too-long-x").is_err());
        assert_eq!(std::mem::size_of::<IfReqFlags>(), 40);
    }
}
