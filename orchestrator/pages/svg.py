"""Chart primitives as inline SVG text: axes, box plot, scatter, line, CDF (pure).

The pages must work offline and with no script (their Content-Security-Policy allows
none), so charts are drawn on the server as SVG. Every chart is an ``<svg role="img">``
labelled by its ``<title>`` and ``<desc>`` (what a screen reader announces), shows its
title and axis labels with units as text, and gives each mark a ``<title>`` (the
browser's tooltip) and ``data-*`` attributes with its values, so a test or a user's
script can read the figures back from the page.

Colours are Okabe & Ito's (2008) palette, distinguishable with the common colour-vision
deficiencies; series are also named in a legend, never told apart by colour alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from html import escape

#: Okabe & Ito (2008), "Color Universal Design", without the yellow (too pale on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")

TickLabel = Callable[[float], str]


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def esc(text: object) -> str:
    """Text for SVG/HTML content and attribute values."""
    return escape(str(text), quote=True)


def _n(v: float) -> str:
    """A coordinate, short: two decimals are far below a pixel."""
    return f"{v:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Frame:
    """Chart size and margins in px; the plot area is what is left inside."""

    width: int = 640
    height: int = 320
    left: int = 68
    right: int = 16
    top: int = 40
    bottom: int = 52

    @property
    def x0(self) -> float:
        return float(self.left)

    @property
    def x1(self) -> float:
        return float(self.width - self.right)

    @property
    def y0(self) -> float:  # bottom of the plot area (SVG y grows downwards)
        return float(self.height - self.bottom)

    @property
    def y1(self) -> float:
        return float(self.top)


@dataclass(frozen=True)
class Scale:
    """Linear map from data ``lo..hi`` to pixels ``a..b``."""

    lo: float
    hi: float
    a: float
    b: float

    def __call__(self, v: float) -> float:
        if self.hi == self.lo:
            return (self.a + self.b) / 2
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def nice_step(span: float, count: int) -> float:
    """A 1, 2, 2.5 or 5 times a power of ten step giving about ``count`` intervals."""
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag * (1 + 1e-9):
            return m * mag
    return 10 * mag


def nice_domain(lo: float, hi: float, count: int = 5) -> tuple[float, float, list[float]]:
    """``lo..hi`` widened to whole steps, and the ticks on them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        lo, hi = (lo - 1, hi + 1) if lo else (0.0, 1.0)
    step = nice_step(hi - lo, count)
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    ticks = [start + i * step for i in range(round((stop - start) / step) + 1)]
    return start, stop, [round(t, 12) for t in ticks]


def tick_text(v: float) -> str:
    """A tick label with no more digits than it needs (1, 2.5, 0.25, 1200)."""
    if v == 0:
        return "0"
    text = f"{v:.3f}".rstrip("0").rstrip(".")
    return text if abs(v) < 1e6 else f"{v:.3g}"


# --- chart skeleton -----------------------------------------------------------------


def _open(chart_id: str, frame: Frame, title: str, desc: str) -> list[str]:
    cid = esc(chart_id)
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{cid}" '
        f'viewBox="0 0 {frame.width} {frame.height}" width="{frame.width}" '
        f'height="{frame.height}" role="img" aria-labelledby="{cid}-title {cid}-desc">',
        f'<title id="{cid}-title">{esc(title)}</title>',
        f'<desc id="{cid}-desc">{esc(desc)}</desc>',
        f'<text class="chart-title" x="{frame.x0}" y="18" font-size="14" '
        f'font-weight="bold">{esc(title)}</text>',
    ]


def _y_axis(frame: Frame, scale: Scale, ticks: Sequence[float], label: str,
            fmt: TickLabel = tick_text) -> list[str]:
    out = ['<g class="axis y-axis" font-size="11">']
    for t in ticks:
        y = _n(scale(t))
        out.append(f'<line class="grid" x1="{frame.x0}" x2="{frame.x1}" y1="{y}" y2="{y}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{frame.x0 - 6}" y="{y}" text-anchor="end" '
                   f'dominant-baseline="middle">{esc(fmt(t))}</text>')
    out.append(f'<line x1="{frame.x0}" x2="{frame.x0}" y1="{frame.y0}" y2="{frame.y1}" '
               'stroke="#333"/>')
    mid = _n((frame.y0 + frame.y1) / 2)
    out.append(f'<text class="axis-label" x="14" y="{mid}" text-anchor="middle" '
               f'transform="rotate(-90 14 {mid})" font-size="12">{esc(label)}</text>')
    out.append("</g>")
    return out


def _x_axis(frame: Frame, scale: Scale, ticks: Sequence[float], label: str,
            fmt: TickLabel = tick_text) -> list[str]:
    out = ['<g class="axis x-axis" font-size="11">',
           f'<line x1="{frame.x0}" x2="{frame.x1}" y1="{frame.y0}" y2="{frame.y0}" '
           'stroke="#333"/>']
    for t in ticks:
        x = _n(scale(t))
        out.append(f'<line x1="{x}" x2="{x}" y1="{frame.y0}" y2="{frame.y0 + 4}" '
                   'stroke="#333"/>')
        out.append(f'<text x="{x}" y="{frame.y0 + 16}" text-anchor="middle">'
                   f'{esc(fmt(t))}</text>')
    out.append(_x_label(frame, label))
    out.append("</g>")
    return out


def _x_label(frame: Frame, label: str) -> str:
    return (f'<text class="axis-label" x="{_n((frame.x0 + frame.x1) / 2)}" '
            f'y="{frame.height - 10}" text-anchor="middle" font-size="12">{esc(label)}</text>')


LEGEND_ROW_PX = 16


def _legend_rows(frame: Frame, names: Sequence[str]) -> list[list[tuple[int, str]]]:
    """Series (index, name) in rows that fit the plot's width; none for one series."""
    if len(names) < 2:
        return []
    rows: list[list[tuple[int, str]]] = [[]]
    used = 0.0
    for i, name in enumerate(names):
        width = _swatch_width(name)
        if rows[-1] and used + width > frame.x1 - frame.x0:
            rows.append([])
            used = 0.0
        rows[-1].append((i, name))
        used += width
    return rows


def _swatch_width(name: str) -> float:
    return 6.5 * len(name) + 26  # ~6.5 px per character at 11 px, swatch and gap


def _with_legend(frame: Frame, names: Sequence[str]) -> Frame:
    """The frame grown at the top by the legend's extra rows (the first fits the margin)."""
    extra = max(len(_legend_rows(frame, names)) - 1, 0) * LEGEND_ROW_PX
    return replace(frame, top=frame.top + extra, height=frame.height + extra)


def _legend(frame: Frame, names: Sequence[str]) -> list[str]:
    """Swatches and names in rows between the title and the plot area."""
    rows = _legend_rows(frame, names)
    if not rows:
        return []
    out = ['<g class="legend" font-size="11">']
    for r, row in enumerate(rows):
        y = 24 + r * LEGEND_ROW_PX
        x = frame.x0
        for i, name in row:
            out.append(f'<rect x="{_n(x)}" y="{y}" width="10" height="10" fill="{colour(i)}"/>')
            out.append(f'<text x="{_n(x + 14)}" y="{y + 9}">{esc(name)}</text>')
            x += _swatch_width(name)
    out.append("</g>")
    return out


# --- box plot -------------------------------------------------------------------------


@dataclass(frozen=True)
class BoxStats:
    """Tukey's box: quartiles, whiskers at the furthest values within 1.5 IQR of the box,
    and the values beyond them (outliers)."""

    n: int
    low: float  # lower whisker
    q1: float
    median: float
    q3: float
    high: float  # upper whisker
    outliers: tuple[float, ...]


def box_stats(values: Sequence[float]) -> BoxStats | None:
    """None for no values. Quartiles by the inclusive method (R's type 7, numpy's
    default), so a single value is its own box."""
    vs = sorted(v for v in values if math.isfinite(v))
    if not vs:
        return None
    if len(vs) == 1:
        q1 = med = q3 = vs[0]
    else:
        q1, med, q3 = statistics.quantiles(vs, n=4, method="inclusive")
    reach = 1.5 * (q3 - q1)  # Tukey's fences
    inside = [v for v in vs if q1 - reach <= v <= q3 + reach]
    return BoxStats(n=len(vs), low=inside[0], q1=q1, median=med, q3=q3, high=inside[-1],
                    outliers=tuple(v for v in vs if v < q1 - reach or v > q3 + reach))


def box_plot(*, chart_id: str, title: str, desc: str, categories: Sequence[str],
             boxes: Sequence[BoxStats | None], x_label: str, y_label: str,
             colour_index: int = 0, unit: str = "", y_max: float | None = None,
             frame: Frame = Frame(), marks: Sequence[Sequence[float]] = (),
             mark_name: str = "") -> str:
    """One box per category; a category with no values gets no box (a gap). ``marks``
    (one list per category, or none at all) are single values drawn over the boxes as
    red diamonds named ``mark_name`` (e.g. each run's first transfer beside the rest)."""
    if len(categories) != len(boxes) or (marks and len(marks) != len(categories)):
        raise ValueError("one box (or None) per category, and one list of marks if any")
    present = [b for b in boxes if b is not None]
    top = max([b.high for b in present] + [o for b in present for o in b.outliers]
              + [m for ms in marks for m in ms] + [0.0])
    lo, hi, ticks = nice_domain(0.0, y_max if y_max is not None else top)
    ys = Scale(lo, hi, frame.y0, frame.y1)
    band = (frame.x1 - frame.x0) / max(len(categories), 1)
    half = band * 0.3
    fill = colour(colour_index)
    out = _open(chart_id, frame, title, desc) + _y_axis(frame, ys, ticks, y_label)
    out.append('<g class="axis x-axis" font-size="11">')
    out.append(f'<line x1="{frame.x0}" x2="{frame.x1}" y1="{frame.y0}" y2="{frame.y0}" '
               'stroke="#333"/>')
    every = max(1, math.ceil(len(categories) / 24))  # at most 24 labels fit
    for i, cat in enumerate(categories):
        if i % every == 0:
            label_x = _n(frame.x0 + band * (i + 0.5))
            out.append(f'<text x="{label_x}" y="{frame.y0 + 16}" text-anchor="middle">'
                       f'{esc(cat)}</text>')
    out.append(_x_label(frame, x_label))
    out.append("</g>")
    out.append('<g class="boxes">')
    for i, (cat, b) in enumerate(zip(categories, boxes, strict=True)):
        if b is None:
            continue
        cx = frame.x0 + band * (i + 0.5)
        tip = (f"{cat}: median {b.median:.3g}{unit}, quartiles {b.q1:.3g}-{b.q3:.3g}{unit}, "
               f"whiskers {b.low:.3g}-{b.high:.3g}{unit}, n={b.n}")
        out.append(f'<g class="box" data-category="{esc(cat)}" data-n="{b.n}" '
                   f'data-median="{b.median:.6g}" data-q1="{b.q1:.6g}" data-q3="{b.q3:.6g}">')
        out.append(f"<title>{esc(tip)}</title>")
        out.append(f'<line class="whisker" x1="{_n(cx)}" x2="{_n(cx)}" y1="{_n(ys(b.low))}" '
                   f'y2="{_n(ys(b.high))}" stroke="#333"/>')
        top_px, bottom_px = ys(b.q3), ys(b.q1)
        out.append(f'<rect x="{_n(cx - half)}" y="{_n(top_px)}" width="{_n(2 * half)}" '
                   f'height="{_n(max(bottom_px - top_px, 1.0))}" fill="{fill}" '
                   'fill-opacity="0.35" stroke="#333"/>')
        my = _n(ys(b.median))
        out.append(f'<line class="median" x1="{_n(cx - half)}" x2="{_n(cx + half)}" '
                   f'y1="{my}" y2="{my}" stroke="#000" stroke-width="2"/>')
        for o in b.outliers:
            out.append(f'<circle class="outlier" cx="{_n(cx)}" cy="{_n(ys(o))}" r="2" '
                       'fill="none" stroke="#333"/>')
        out.append("</g>")
    out.append("</g>")
    if marks:
        out.append(f'<g class="marks" data-name="{esc(mark_name)}">')
        for i, (cat, ms) in enumerate(zip(categories, marks, strict=True)):
            cx = frame.x0 + band * (i + 0.5)
            for m in ms:
                y = ys(m)
                out.append(f'<path class="mark" data-category="{esc(cat)}" '
                           f'data-value="{m:.6g}" d="M{_n(cx)} {_n(y - 5)} l5 5 l-5 5 l-5 -5 z" '
                           f'fill="#c00" stroke="#600"><title>{esc(mark_name)} '
                           f"{esc(cat)}: {m:.3g}{esc(unit)}</title></path>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


# --- scatter, line, CDF -----------------------------------------------------------------


@dataclass(frozen=True)
class XYSeries:
    """Named points; ``labels`` (one per point, optional) become the marks' tooltips."""

    name: str
    points: Sequence[tuple[float, float]]
    labels: Sequence[str] = ()


def _xy_domain(series: Sequence[XYSeries], *, from_zero: bool) -> tuple[float, float,
                                                                         float, float]:
    xs = [x for s in series for x, _ in s.points if math.isfinite(x)]
    ys = [y for s in series for _, y in s.points if math.isfinite(y)]
    if not xs:
        return 0.0, 1.0, 0.0, 1.0
    x_lo, y_lo = (0.0, 0.0) if from_zero else (min(xs), min(ys))
    return x_lo, max(xs), y_lo, max(ys)


def scatter(*, chart_id: str, title: str, desc: str, series: Sequence[XYSeries],
            x_label: str, y_label: str, diagonal: bool = False,
            frame: Frame = Frame(height=360)) -> str:
    """Points of each series; ``diagonal`` draws y = x on equal axes from 0 (estimate
    against truth: points on the line are exact)."""
    frame = _with_legend(frame, [s.name for s in series])
    x_lo, x_hi, y_lo, y_hi = _xy_domain(series, from_zero=True)
    if diagonal:
        x_hi = y_hi = max(x_hi, y_hi)
    x_lo, x_hi, x_ticks = nice_domain(x_lo, x_hi)
    y_lo, y_hi, y_ticks = nice_domain(y_lo, y_hi)
    xs, ys = Scale(x_lo, x_hi, frame.x0, frame.x1), Scale(y_lo, y_hi, frame.y0, frame.y1)
    out = _open(chart_id, frame, title, desc) + _y_axis(frame, ys, y_ticks, y_label)
    out += _x_axis(frame, xs, x_ticks, x_label)
    if diagonal:
        end = min(x_hi, y_hi)
        out.append(f'<line class="diagonal" x1="{_n(xs(0))}" y1="{_n(ys(0))}" '
                   f'x2="{_n(xs(end))}" y2="{_n(ys(end))}" stroke="#888" '
                   'stroke-dasharray="4 3"><title>y = x</title></line>')
    for i, s in enumerate(series):
        out.append(f'<g class="series" data-series="{esc(s.name)}">')
        for j, (x, y) in enumerate(s.points):
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            tip = s.labels[j] if j < len(s.labels) else f"{s.name}: ({x:.3g}, {y:.3g})"
            out.append(f'<circle class="point" cx="{_n(xs(x))}" cy="{_n(ys(y))}" r="3.5" '
                       f'fill="{colour(i)}" fill-opacity="0.7" data-x="{x:.6g}" '
                       f'data-y="{y:.6g}"><title>{esc(tip)}</title></circle>')
        out.append("</g>")
    out += _legend(frame, [s.name for s in series])
    out.append("</svg>")
    return "\n".join(out)


def line_chart(*, chart_id: str, title: str, desc: str, series: Sequence[XYSeries],
               x_label: str, y_label: str, x_ticks: Sequence[float] | None = None,
               x_tick_label: TickLabel = tick_text, frame: Frame = Frame()) -> str:
    """A line with a marker at each point, per series; y from 0 (rates)."""
    frame = _with_legend(frame, [s.name for s in series])
    x_lo, x_hi, y_lo, y_hi = _xy_domain(series, from_zero=False)
    y_lo, y_hi, y_ticks = nice_domain(min(0.0, y_lo), y_hi)
    if x_ticks is None:
        x_lo, x_hi, ticks = nice_domain(x_lo, x_hi)
    else:
        ticks = list(x_ticks)
        x_lo, x_hi = min([x_lo, *ticks]), max([x_hi, *ticks])
        if x_hi == x_lo:
            x_lo, x_hi = x_lo - 1, x_hi + 1
    pad = (x_hi - x_lo) * 0.03  # keep end markers off the axis
    xs = Scale(x_lo - pad, x_hi + pad, frame.x0, frame.x1)
    ys = Scale(y_lo, y_hi, frame.y0, frame.y1)
    out = _open(chart_id, frame, title, desc) + _y_axis(frame, ys, y_ticks, y_label)
    out += _x_axis(frame, xs, ticks, x_label, x_tick_label)
    for i, s in enumerate(series):
        pts = sorted((x, y) for x, y in s.points if math.isfinite(x) and math.isfinite(y))
        path = " ".join(f"{_n(xs(x))},{_n(ys(y))}" for x, y in pts)
        out.append(f'<g class="series" data-series="{esc(s.name)}">')
        out.append(f'<polyline class="line" points="{path}" fill="none" stroke="{colour(i)}" '
                   'stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle class="marker" cx="{_n(xs(x))}" cy="{_n(ys(y))}" r="3" '
                       f'fill="{colour(i)}" data-x="{x:.6g}" data-y="{y:.6g}"><title>'
                       f'{esc(f"{s.name}: {x_tick_label(x)}: {y:.3g}")}</title></circle>')
        out.append("</g>")
    out += _legend(frame, [s.name for s in series])
    out.append("</svg>")
    return "\n".join(out)


def cdf(*, chart_id: str, title: str, desc: str, series: Sequence[tuple[str, Sequence[float]]],
        x_label: str, y_label: str = "Fraction of values (cumulative)",
        x_max: float | None = None, frame: Frame = Frame()) -> str:
    """Empirical CDF of each series as a step line; values beyond ``x_max`` run off
    the right edge (the tooltip still tells the largest)."""
    frame = _with_legend(frame, [name for name, _ in series])
    finite = [(name, sorted(v for v in vals if math.isfinite(v))) for name, vals in series]
    top = max((vals[-1] for _, vals in finite if vals), default=1.0)
    x_lo, x_hi, x_ticks = nice_domain(0.0, x_max if x_max is not None else top)
    xs, ys = Scale(x_lo, x_hi, frame.x0, frame.x1), Scale(0.0, 1.0, frame.y0, frame.y1)
    out = _open(chart_id, frame, title, desc)
    out += _y_axis(frame, ys, [0, 0.25, 0.5, 0.75, 1.0], y_label)
    out += _x_axis(frame, xs, x_ticks, x_label)
    for i, (name, vals) in enumerate(finite):
        if not vals:
            continue
        n = len(vals)
        steps = [f"M{_n(xs(x_lo))},{_n(ys(0))}"]
        for k, v in enumerate(vals, start=1):
            x = _n(xs(min(v, x_hi)))
            steps.append(f"H{x} V{_n(ys(k / n))}")
        steps.append(f"H{_n(xs(x_hi))}")
        median = statistics.median(vals)
        tip = f"{name}: n={n}, median {median:.3g}, max {vals[-1]:.3g}"
        out.append(f'<path class="cdf" data-series="{esc(name)}" data-n="{n}" '
                   f'data-median="{median:.6g}" d="{" ".join(steps)}" fill="none" '
                   f'stroke="{colour(i)}" stroke-width="2"><title>{esc(tip)}</title></path>')
    out += _legend(frame, [name for name, _ in finite])
    out.append("</svg>")
    return "\n".join(out)


# --- predictions with intervals ---------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A prediction with its interval at ``x``, and what was measured there (if any)."""

    x: float
    predicted: float
    low: float
    high: float
    measured: float | None = None

    @property
    def covered(self) -> bool | None:
        return None if self.measured is None else self.low <= self.measured <= self.high


def interval_chart(*, chart_id: str, title: str, desc: str, intervals: Sequence[Interval],
                   x_label: str, y_label: str, frame: Frame = Frame(height=340)) -> str:
    """Each prediction as a marker with its interval as a vertical bar, and the value
    measured there as a second marker (hollow when outside the interval); y from 0.
    Names: "predicted (interval)" and "measured", in the legend too."""
    names = ["predicted (interval)", "measured"]
    frame = _with_legend(frame, names)
    finite = [v for iv in intervals for v in (iv.predicted, iv.low, iv.high, iv.measured)
              if v is not None and math.isfinite(v)]
    xs_all = [iv.x for iv in intervals]
    x_lo, x_hi, x_ticks = nice_domain(min(xs_all, default=0.0), max(xs_all, default=1.0))
    y_lo, y_hi, y_ticks = nice_domain(0.0, max(finite, default=1.0))
    xs, ys = Scale(x_lo, x_hi, frame.x0, frame.x1), Scale(y_lo, y_hi, frame.y0, frame.y1)
    out = _open(chart_id, frame, title, desc) + _y_axis(frame, ys, y_ticks, y_label)
    out += _x_axis(frame, xs, x_ticks, x_label)
    out.append(f'<g class="series" data-series="{names[0]}">')
    for iv in intervals:
        x = _n(xs(iv.x))
        top = iv.high if math.isfinite(iv.high) else y_hi
        tip = (f"x {iv.x:.3g}: predicted {iv.predicted:.3g}, interval {iv.low:.3g} to "
               f"{iv.high:.3g}" + (f", measured {iv.measured:.3g}"
                                   if iv.measured is not None else ""))
        covered = "" if iv.covered is None else f' data-covered="{str(iv.covered).lower()}"'
        out.append(f'<g class="interval" data-x="{iv.x:.6g}" data-predicted='
                   f'"{iv.predicted:.6g}" data-low="{iv.low:.6g}" data-high="{iv.high:.6g}"'
                   + ("" if iv.measured is None else f' data-measured="{iv.measured:.6g}"')
                   + f"{covered}><title>{esc(tip)}</title>")
        out.append(f'<line x1="{x}" x2="{x}" y1="{_n(ys(iv.low))}" y2="{_n(ys(top))}" '
                   f'stroke="{colour(0)}" stroke-width="2" stroke-opacity="0.6"/>')
        out.append(f'<circle cx="{x}" cy="{_n(ys(iv.predicted))}" r="3" '
                   f'fill="{colour(0)}"/>')
        out.append("</g>")
    out.append("</g>")
    out.append(f'<g class="series" data-series="{names[1]}">')
    for iv in intervals:
        if iv.measured is None:
            continue
        fill = colour(1) if iv.covered else "none"
        out.append(f'<circle class="point" cx="{_n(xs(iv.x))}" cy="{_n(ys(iv.measured))}" '
                   f'r="4" fill="{fill}" stroke="{colour(1)}" stroke-width="1.5" '
                   f'data-x="{iv.x:.6g}" data-y="{iv.measured:.6g}"><title>'
                   f'{esc(f"measured {iv.measured:.3g}")}</title></circle>')
    out.append("</g>")
    out += _legend(frame, names)
    out.append("</svg>")
    return "\n".join(out)
