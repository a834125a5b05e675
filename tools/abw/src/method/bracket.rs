//! A bisection bracket [lo, hi] on the probing rate that remembers how its
//! edges moved, so that a search driven by noisy verdicts can take one back.
//!
//! Why: one stream's verdict is a sample of what the cross traffic did
//! during that stream. In plain bisection a single wrong verdict early on
//! (a Poisson burst during a stream well below A, a lull during one above
//! it) moves an edge past A for good: every later verdict then pushes the
//! other edge towards it, and the search converges on the wrong edge. That
//! leaves a signature, a run of verdicts that all moved the same edge while
//! the other one stayed where it was set long ago. Re-testing that stale
//! edge once and restoring its previous position when the re-test
//! disagrees (noisy binary search with backtracking) undoes the mistake at
//! the cost of one stream when there was none.

/// One side of the bracket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Lo,
    Hi,
}

#[derive(Debug, Clone)]
struct Edge {
    value: f64,
    /// Verdict count when a verdict last set this edge (None: initial).
    set_at: Option<usize>,
    /// Earlier (value, set_at), most recent last.
    previous: Vec<(f64, Option<usize>)>,
}

impl Edge {
    fn new(value: f64) -> Edge {
        Edge {
            value,
            set_at: None,
            previous: Vec::new(),
        }
    }

    fn set(&mut self, value: f64, at: usize) {
        self.previous.push((self.value, self.set_at));
        self.value = value;
        self.set_at = Some(at);
    }

    fn restore(&mut self) {
        if let Some((v, at)) = self.previous.pop() {
            self.value = v;
            self.set_at = at;
        }
    }
}

/// The bracket and its history.
#[derive(Debug, Clone)]
pub struct Bracket {
    lo: Edge,
    hi: Edge,
    verdicts: usize,
}

impl Bracket {
    pub fn new(lo: f64, hi: f64) -> Bracket {
        Bracket {
            lo: Edge::new(lo),
            hi: Edge::new(hi),
            verdicts: 0,
        }
    }

    pub fn lo(&self) -> f64 {
        self.lo.value
    }

    pub fn hi(&self) -> f64 {
        self.hi.value
    }

    pub fn mid(&self) -> f64 {
        (self.lo.value + self.hi.value) / 2.0
    }

    /// Narrower than `resolution` relative to its upper end.
    pub fn converged(&self, resolution: f64) -> bool {
        self.hi.value - self.lo.value <= resolution * self.hi.value
    }

    /// A stream at `rate` was below A: `rate` becomes the lower edge.
    pub fn below(&mut self, rate: f64) {
        self.verdicts += 1;
        self.lo.set(rate, self.verdicts);
    }

    /// A stream at `rate` was above A: `rate` becomes the upper edge.
    pub fn above(&mut self, rate: f64) {
        self.verdicts += 1;
        self.hi.set(rate, self.verdicts);
    }

    /// Move the upper edge without a verdict (search widening).
    pub fn widen_hi(&mut self, hi: f64) {
        self.hi.value = hi;
    }

    /// The edge to re-test, if any: the one set by a verdict longer ago,
    /// provided at least `min_run` later verdicts all moved the other edge.
    pub fn stale(&self, min_run: usize) -> Option<Side> {
        let (lo, hi) = (self.lo.set_at?, self.hi.set_at?);
        let (side, at) = if lo < hi {
            (Side::Lo, lo)
        } else {
            (Side::Hi, hi)
        };
        (self.verdicts - at >= min_run).then_some(side)
    }

    /// Rate of an edge.
    pub fn edge(&self, side: Side) -> f64 {
        match side {
            Side::Lo => self.lo.value,
            Side::Hi => self.hi.value,
        }
    }

    /// A re-test of edge `side` agreed with the verdict that set it: the
    /// edge counts as freshly set.
    pub fn confirm(&mut self, side: Side) {
        self.verdicts += 1;
        match side {
            Side::Lo => self.lo.set_at = Some(self.verdicts),
            Side::Hi => self.hi.set_at = Some(self.verdicts),
        }
    }

    /// A re-test of edge `side` disagreed with the verdict that set it: the
    /// edge goes back to where it was before, and the re-test's verdict
    /// moves the other edge to the re-tested rate.
    pub fn contradict(&mut self, side: Side) {
        match side {
            Side::Lo => {
                let rate = self.lo.value;
                self.lo.restore();
                self.above(rate);
            }
            Side::Hi => {
                let rate = self.hi.value;
                self.hi.restore();
                self.below(rate);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_edge_after_a_one_sided_run() {
        let mut b = Bracket::new(0.0, 100.0);
        assert_eq!(b.stale(2), None); // nothing set by a verdict yet
        b.above(60.0);
        b.below(30.0); // wrong: A is 20
        b.above(45.0);
        b.above(37.5);
        assert_eq!(b.stale(2), Some(Side::Lo));
        assert_eq!(b.stale(3), None);
        b.contradict(Side::Lo);
        assert_eq!((b.lo(), b.hi()), (0.0, 30.0));
        b.below(15.0);
        assert_eq!(b.stale(2), None);
    }

    #[test]
    fn contradicted_upper_edge_goes_back() {
        let mut b = Bracket::new(0.0, 100.0);
        b.above(50.0);
        b.above(25.0); // wrong: A is 40
        b.below(12.5);
        b.below(18.75);
        b.below(21.9);
        assert_eq!(b.stale(2), Some(Side::Hi));
        assert_eq!(b.edge(Side::Hi), 25.0);
        let mut confirmed = b.clone();
        confirmed.confirm(Side::Hi);
        assert_eq!(confirmed.stale(2), None);
        assert_eq!((confirmed.lo(), confirmed.hi()), (21.9, 25.0));
        b.contradict(Side::Hi);
        assert_eq!((b.lo(), b.hi()), (25.0, 50.0));
        assert!(!b.converged(0.05));
        b.widen_hi(75.0);
        assert_eq!(b.hi(), 75.0);
    }
}
