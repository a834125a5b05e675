//! What one probe stream looked like at both ends: the pure input of every
//! estimation method. Built by the I/O layer from send timestamps (carried in
//! each packet) and receive timestamps (kernel `SO_TIMESTAMPNS` where
//! available), or synthesised by tests.

use serde::{Deserialize, Serialize};

/// One received probe packet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rx {
    /// Sequence number within the stream (0-based).
    pub seq: u32,
    /// Send time at the sender, ns (sender's clock).
    pub send_ns: u64,
    /// Receive time at the receiver, ns (receiver's clock).
    pub recv_ns: u64,
}

/// Everything observed about one stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observation {
    /// Packets the sender actually sent.
    pub sent: u32,
    /// IP packet size, bytes.
    pub size: usize,
    /// Received packets, deduplicated, in arrival order (may be reordered).
    pub rx: Vec<Rx>,
}

impl Observation {
    /// The observation of the measured stream alone: the first `lead`
    /// packets (a lead-in, see [`crate::method::ProbeSpec::with_lead`])
    /// removed and the sequence numbers shifted down by `lead`.
    pub fn without_lead(mut self, lead: usize) -> Observation {
        if lead == 0 {
            return self;
        }
        let lead = lead as u32;
        self.sent = self.sent.saturating_sub(lead);
        self.rx.retain(|r| r.seq >= lead);
        for r in &mut self.rx {
            r.seq -= lead;
        }
        self
    }

    /// Fraction of sent packets not received.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 0.0;
        }
        1.0 - (self.rx.len() as f64 / self.sent as f64).min(1.0)
    }

    /// Received packets sorted by sequence number.
    pub fn by_seq(&self) -> Vec<Rx> {
        let mut v = self.rx.clone();
        v.sort_by_key(|r| r.seq);
        v
    }

    /// Mean input and output spacing (seconds per packet slot) over the
    /// received packets, robust to loss and reordering: the input span is
    /// the send time between the lowest and highest received sequence
    /// numbers, the output span is the first to the last arrival, both
    /// divided by the number of sequence slots between them. `None` with
    /// fewer than two received packets.
    pub fn mean_spacings(&self) -> Option<(f64, f64)> {
        if self.rx.len() < 2 {
            return None;
        }
        let lo = self.rx.iter().min_by_key(|r| r.seq)?;
        let hi = self.rx.iter().max_by_key(|r| r.seq)?;
        let slots = (hi.seq - lo.seq) as f64;
        if slots <= 0.0 {
            return None;
        }
        let first = self.rx.iter().map(|r| r.recv_ns).min()?;
        let last = self.rx.iter().map(|r| r.recv_ns).max()?;
        let g_in = hi.send_ns.saturating_sub(lo.send_ns) as f64 / slots / 1e9;
        let g_out = last.saturating_sub(first) as f64 / slots / 1e9;
        Some((g_in, g_out))
    }

    /// Robust mean spacing difference g_out - g_in (seconds per packet
    /// slot): the change of the one-way delay between the first and the
    /// last fifth of the stream (median of each group, by sequence number)
    /// divided by the sequence distance between the groups' medians. Equal
    /// to the endpoint-based difference of [`Self::mean_spacings`] on a
    /// clean stream, but a single delayed first or last packet (a
    /// cross-traffic burst, a descheduled receiver) cannot flip it. Falls
    /// back to the endpoints with fewer than 10 packets.
    pub fn spacing_difference(&self) -> Option<f64> {
        let v = self.by_seq();
        if v.len() < 10 {
            let (gi, go) = self.mean_spacings()?;
            return Some(go - gi);
        }
        let k = (v.len() / 5).max(2);
        let owd = |r: &Rx| r.recv_ns as f64 - r.send_ns as f64;
        let head: Vec<f64> = v[..k].iter().map(owd).collect();
        let tail: Vec<f64> = v[v.len() - k..].iter().map(owd).collect();
        let sh: Vec<f64> = v[..k].iter().map(|r| r.seq as f64).collect();
        let st: Vec<f64> = v[v.len() - k..].iter().map(|r| r.seq as f64).collect();
        let slots = median(&st)? - median(&sh)?;
        if slots <= 0.0 {
            return None;
        }
        Some((median(&tail)? - median(&head)?) / slots / 1e9)
    }

    /// Standard error (seconds per packet slot) that [`Self::spacing_difference`]
    /// would show on this stream if the queue had no drift, estimated from
    /// the stream itself: the spread of the one-way-delay change over a lag
    /// of a quarter of the stream (mean change, i.e. the drift, removed),
    /// scaled to the whole stream as for a random walk.
    ///
    /// Why: under bursty (e.g. Poisson) cross traffic a short stream sent
    /// *below* the available bandwidth still sees the queue wander, and
    /// from a near-empty start it tends to grow (a driftless reflected walk
    /// climbs like the square root of time), so a fixed threshold on the
    /// trend calls such streams "above". Why a lag and not consecutive
    /// packets: a queue that wanders (random walk) spreads more the longer
    /// the lag, while bounded jitter (whether a cross packet got in
    /// between, receiver timestamping) does not; at low rates one cross
    /// packet is a large part of a probe slot and that bounded noise would
    /// otherwise dominate. The 10% largest deviations are left out so that
    /// one descheduled sender or receiver does not decide. `None` with
    /// fewer than 10 packets.
    pub fn trend_noise(&self) -> Option<f64> {
        let v = self.by_seq();
        if v.len() < 10 {
            return None;
        }
        let lag = v.len() / 4;
        let owd = |r: &Rx| r.recv_ns as f64 - r.send_ns as f64;
        let d: Vec<f64> = v
            .iter()
            .zip(&v[lag..])
            .map(|(a, b)| owd(b) - owd(a))
            .collect();
        let lag_slots = v
            .iter()
            .zip(&v[lag..])
            .map(|(a, b)| (b.seq - a.seq) as f64)
            .sum::<f64>()
            / d.len() as f64;
        let span = (v[v.len() - 1].seq - v[0].seq) as f64;
        let m = d.iter().sum::<f64>() / d.len() as f64;
        let mut dev: Vec<f64> = d.iter().map(|x| (x - m).abs()).collect();
        dev.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        dev.truncate(dev.len() - dev.len() / 10);
        let var = dev.iter().map(|x| x * x).sum::<f64>() / dev.len() as f64;
        Some(var.sqrt() / (lag_slots * span).sqrt() / 1e9)
    }

    /// Achieved send rate (IP bit/s) over the received packets' span.
    pub fn input_rate(&self) -> Option<f64> {
        let (g_in, _) = self.mean_spacings()?;
        (g_in > 0.0).then(|| self.size as f64 * 8.0 / g_in)
    }

    /// Received rate (IP bit/s): dispersion rate of the received packets.
    pub fn output_rate(&self) -> Option<f64> {
        if self.rx.len() < 2 {
            return None;
        }
        let first = self.rx.iter().map(|r| r.recv_ns).min()?;
        let last = self.rx.iter().map(|r| r.recv_ns).max()?;
        let span = last.saturating_sub(first) as f64 / 1e9;
        (span > 0.0).then(|| (self.rx.len() - 1) as f64 * self.size as f64 * 8.0 / span)
    }

    /// Relative one-way delays (seconds, minimum subtracted) in sequence
    /// order; the clock offset between hosts cancels out.
    pub fn owds(&self) -> Vec<f64> {
        let v = self.by_seq();
        let raw: Vec<i128> = v
            .iter()
            .map(|r| r.recv_ns as i128 - r.send_ns as i128)
            .collect();
        let min = raw.iter().copied().min().unwrap_or(0);
        raw.iter().map(|d| (d - min) as f64 / 1e9).collect()
    }
}

/// Median of a slice (NaN-free); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Synthetic observations for unit tests: a fluid single-bottleneck model.
#[cfg(test)]
pub mod synth {
    use super::*;

    /// A periodic stream of `n` packets of `size` bytes sent at `rate` bit/s
    /// through a FIFO link of capacity `cap` bit/s carrying constant fluid
    /// cross traffic `cross` bit/s. Returns the observation (no loss).
    pub fn fluid(n: u32, size: usize, rate: f64, cap: f64, cross: f64) -> Observation {
        let gap = size as f64 * 8.0 / rate;
        let mut backlog_bits = 0.0f64; // queue content when packet i arrives
        let mut rx = Vec::new();
        let t0 = 1_000_000_000u64;
        let mut last_t = 0.0f64;
        for i in 0..n {
            let t = i as f64 * gap;
            // queue drains at cap, fills with cross traffic
            let dt = t - last_t;
            backlog_bits = (backlog_bits + cross * dt - cap * dt).max(0.0);
            backlog_bits += size as f64 * 8.0;
            last_t = t;
            let delay = backlog_bits / cap;
            let send_ns = t0 + (t * 1e9) as u64;
            rx.push(Rx {
                seq: i,
                send_ns,
                recv_ns: send_ns + 5_000_000 + (delay * 1e9) as u64,
            });
        }
        Observation { sent: n, size, rx }
    }

    /// Packet-level model of one FIFO bottleneck of capacity `cap` bit/s
    /// with a drop-tail buffer of `limit_bytes`, carrying Poisson cross
    /// traffic of `cross_size`-byte packets at `cross_bps` on average (the
    /// bench's abw-cross with `--process poisson`). Time runs on across
    /// probes (pauses included), so the queue a probe finds is what the
    /// cross traffic left behind, as on the bench. Work is tracked as the
    /// backlog in seconds (Lindley's recursion).
    pub struct PoissonFifo {
        pub cap: f64,
        pub cross_bps: f64,
        pub cross_size: usize,
        pub limit_bytes: f64,
        rng: crate::rng::Rng,
        /// Current time (s) and the backlog (s of work) at that time.
        now: f64,
        backlog: f64,
        next_cross: f64,
        /// Cross traffic bytes that arrived since `new` (ground truth).
        pub cross_bytes: f64,
    }

    impl PoissonFifo {
        /// The bench's buffer: max(C x 200 ms, 32 kB).
        pub fn new(cap: f64, cross_bps: f64, seed: u64) -> PoissonFifo {
            let mut rng = crate::rng::Rng::new(seed);
            let cross_size = 1000;
            let first = if cross_bps > 0.0 {
                rng.exponential(cross_size as f64 * 8.0 / cross_bps)
            } else {
                f64::INFINITY
            };
            PoissonFifo {
                cap,
                cross_bps,
                cross_size,
                limit_bytes: (cap * 0.2 / 8.0).max(32e3),
                rng,
                now: 0.0,
                backlog: 0.0,
                next_cross: first,
                cross_bytes: 0.0,
            }
        }

        pub fn now(&self) -> f64 {
            self.now
        }

        /// Advance to time `t`, letting the cross traffic in.
        fn advance(&mut self, t: f64) {
            while self.next_cross <= t {
                let ta = self.next_cross;
                self.backlog = (self.backlog - (ta - self.now)).max(0.0);
                self.now = ta;
                let bytes = self.cross_size as f64;
                if self.backlog * self.cap / 8.0 + bytes <= self.limit_bytes {
                    self.backlog += bytes * 8.0 / self.cap;
                }
                self.cross_bytes += bytes;
                self.next_cross += self
                    .rng
                    .exponential(self.cross_size as f64 * 8.0 / self.cross_bps);
            }
            self.backlog = (self.backlog - (t - self.now)).max(0.0);
            self.now = t;
        }

        /// Idle for `s` seconds (e.g. a report's round trip).
        pub fn idle(&mut self, s: f64) {
            let t = self.now + s;
            self.advance(t);
        }

        /// Send `spec` (after its pause) and observe it, lead removed as
        /// the client does.
        pub fn probe(&mut self, spec: &crate::method::ProbeSpec) -> Observation {
            let t0 = self.now + spec.pause_s;
            let service = spec.size as f64 * 8.0 / self.cap;
            let mut rx = Vec::new();
            for (i, off) in spec.offsets_ns.iter().enumerate() {
                let t = t0 + *off as f64 / 1e9;
                self.advance(t);
                if self.backlog * self.cap / 8.0 + spec.size as f64 > self.limit_bytes {
                    continue;
                }
                let delay = self.backlog + service;
                self.backlog += service;
                let send_ns = (t * 1e9) as u64;
                rx.push(Rx {
                    seq: i as u32,
                    send_ns,
                    recv_ns: send_ns + (delay * 1e9) as u64,
                });
            }
            let obs = Observation {
                sent: spec.offsets_ns.len() as u32,
                size: spec.size,
                rx,
            };
            obs.without_lead(spec.lead)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spacings_under_loss_and_reordering() {
        let mut o = synth::fluid(50, 1400, 10e6, 20e6, 0.0);
        // drop packets 0 and 10, swap arrival order of 20 and 21
        o.rx.retain(|r| r.seq != 0 && r.seq != 10);
        let a = o.rx.iter().position(|r| r.seq == 20).unwrap();
        o.rx.swap(a, a + 1);
        let (gi, go) = o.mean_spacings().unwrap();
        assert!((gi - 1400.0 * 8.0 / 10e6).abs() < 1e-7);
        assert!((go - gi).abs() / gi < 0.01);
        assert!((o.loss() - 2.0 / 50.0).abs() < 1e-9);
    }

    #[test]
    fn expansion_above_available_bandwidth() {
        // A = 20 - 12 = 8 Mbit/s; probing at 10 expands the stream.
        let o = synth::fluid(50, 1400, 10e6, 20e6, 12e6);
        let (gi, go) = o.mean_spacings().unwrap();
        assert!(go > gi * 1.05, "gi {gi} go {go}");
        let owd = o.owds();
        assert!(owd.last().unwrap() > owd.first().unwrap());
    }

    #[test]
    fn robust_difference_ignores_one_late_packet() {
        let mut o = synth::fluid(50, 1400, 5e6, 20e6, 0.0);
        let (gi, go) = o.mean_spacings().unwrap();
        assert!(o.spacing_difference().unwrap().abs() < 1e-6 && (go - gi).abs() < 1e-6);
        // the last packet is delayed by 3 ms: endpoints see expansion
        o.rx.last_mut().unwrap().recv_ns += 3_000_000;
        let (gi, go) = o.mean_spacings().unwrap();
        assert!((go - gi) > 50e-6);
        assert!(o.spacing_difference().unwrap().abs() < 1e-6);
        // a real trend is kept
        let t = synth::fluid(50, 1400, 15e6, 20e6, 10e6);
        let (gi, go) = t.mean_spacings().unwrap();
        let d = t.spacing_difference().unwrap();
        assert!(
            (d - (go - gi)).abs() / (go - gi) < 0.1,
            "{d} vs {}",
            go - gi
        );
    }

    #[test]
    fn trend_noise_separates_smooth_and_bursty_queues() {
        let smooth = synth::fluid(50, 1400, 5e6, 20e6, 10e6);
        assert!(smooth.trend_noise().unwrap() < 1e-7);
        // bounded jitter of 0-400 us and a queue that wanders by +-200 us
        // steps (a random walk): the walk is the noisier
        let mut rng = crate::rng::Rng::new(3);
        let mut jitter = smooth.clone();
        let mut walk = smooth.clone();
        let mut level = 2_000_000i64;
        for (j, w) in jitter.rx.iter_mut().zip(walk.rx.iter_mut()) {
            j.recv_ns += (rng.uniform() * 400_000.0) as u64;
            level += if rng.uniform() < 0.5 {
                200_000
            } else {
                -200_000
            };
            w.recv_ns += level.max(0) as u64;
        }
        let (nj, nw) = (jitter.trend_noise().unwrap(), walk.trend_noise().unwrap());
        assert!(nj > 1e-6 && nj < 20e-6, "jitter noise {nj}");
        assert!(nw > 2.0 * nj, "walk noise {nw} vs jitter {nj}");
        assert!(synth::fluid(5, 1400, 5e6, 20e6, 0.0)
            .trend_noise()
            .is_none());
    }

    #[test]
    fn lead_is_removed() {
        let o = synth::fluid(10, 1400, 5e6, 20e6, 0.0);
        let s = o.clone().without_lead(3);
        assert_eq!((s.sent, s.rx.len()), (7, 7));
        assert_eq!(s.rx[0].seq, 0);
        assert_eq!(s.rx[0].send_ns, o.rx[3].send_ns);
        assert_eq!(o.clone().without_lead(0), o);
    }

    #[test]
    fn median_works() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
