//! A small document builder for presentable A4 PDFs: a title block, KPI
//! tiles, bar and line charts, tables and paragraphs, laid out top to bottom
//! and flowed onto new pages as needed. Exports and report runs both render
//! with it, so every PDF Postern sends looks the same.
//!
//! Text is set in DejaVu Sans (vendored in `analytics/assets/fonts` with its
//! licence), embedded and subset by krilla, so the file renders the same in
//! every viewer and its text can be searched and extracted.

use krilla::color::rgb;
use krilla::geom::{PathBuilder, Point, Rect};
use krilla::metadata::Metadata;
use krilla::num::NormalizedF32;
use krilla::page::PageSettings;
use krilla::paint::{Fill, Stroke};
use krilla::surface::Surface;
use krilla::text::{Font, TextDirection};
use skrifa::instance::{LocationRef, Size};
use skrifa::{FontRef, MetadataProvider};

use crate::{Error, Result};

static REGULAR: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
static BOLD: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold.ttf");

// A4 in points, and the page margin.
const PAGE_W: f32 = 595.28;
const PAGE_H: f32 = 841.89;
const MARGIN: f32 = 48.0;
const CONTENT_W: f32 = PAGE_W - 2.0 * MARGIN;
// Content stops above the footer.
const BOTTOM: f32 = PAGE_H - MARGIN - 14.0;
const GAP: f32 = 14.0;

/// Colours as (red, green, blue).
type Rgb = (u8, u8, u8);

const INK: Rgb = (15, 23, 42);
const MUTED: Rgb = (100, 116, 139);
const ACCENT: Rgb = (79, 70, 229);
const TILE: Rgb = (241, 245, 249);
const RULE: Rgb = (226, 232, 240);
const ZEBRA: Rgb = (248, 250, 252);

/// One KPI tile: a label, a large value, and an optional line under it.
#[derive(Debug, Clone)]
pub struct Kpi {
    pub label: String,
    pub value: String,
    pub note: Option<String>,
}

impl Kpi {
    pub fn new(label: impl Into<String>, value: impl Into<String>) -> Kpi {
        Kpi { label: label.into(), value: value.into(), note: None }
    }

    pub fn note(mut self, note: impl Into<String>) -> Kpi {
        self.note = Some(note.into());
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    Bars,
    Line,
}

/// A one-series chart: one value per label, labels along the x axis.
#[derive(Debug, Clone)]
pub struct Chart {
    pub kind: ChartKind,
    pub labels: Vec<String>,
    pub values: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table with a header row. Tables longer than a page continue on the
/// next one with their header repeated.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns as (title, alignment); numbers read best right-aligned.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table { columns: columns.iter().map(|(t, a)| ((*t).to_owned(), *a)).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are blank, extra cells are ignored.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).take(self.columns.len()).collect();
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

#[derive(Debug, Clone)]
enum Block {
    Heading(String),
    Paragraph(String),
    Kpis(Vec<Kpi>),
    Chart(Chart),
    Table(Table),
}

/// A document under construction. Blocks are laid out in the order added.
#[derive(Debug, Clone)]
pub struct Document {
    title: String,
    subtitle: Vec<String>,
    footer: String,
    blocks: Vec<Block>,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Document {
        Document { title: title.into(), subtitle: Vec::new(), footer: "Postern".to_owned(), blocks: Vec::new() }
    }

    /// A line under the title (site, period...); may be called several times.
    pub fn subtitle(&mut self, line: impl Into<String>) -> &mut Document {
        self.subtitle.push(line.into());
        self
    }

    /// The text at the bottom left of every page (the page number is on the right).
    pub fn footer(&mut self, text: impl Into<String>) -> &mut Document {
        self.footer = text.into();
        self
    }

    pub fn heading(&mut self, text: impl Into<String>) -> &mut Document {
        self.blocks.push(Block::Heading(text.into()));
        self
    }

    /// Wrapped body text.
    pub fn paragraph(&mut self, text: impl Into<String>) -> &mut Document {
        self.blocks.push(Block::Paragraph(text.into()));
        self
    }

    /// Tiles in rows of at most four, spread evenly over the rows.
    pub fn kpis(&mut self, tiles: Vec<Kpi>) -> &mut Document {
        self.blocks.push(Block::Kpis(tiles));
        self
    }

    pub fn chart(&mut self, chart: Chart) -> &mut Document {
        self.blocks.push(Block::Chart(chart));
        self
    }

    pub fn table(&mut self, table: Table) -> &mut Document {
        self.blocks.push(Block::Table(table));
        self
    }

    /// Lays out and serializes the document.
    pub fn render(&self) -> Result<Vec<u8>> {
        let fonts = Fonts::load()?;
        let mut pages: Vec<Vec<Op>> = vec![Vec::new()];
        let mut y = MARGIN;
        let mut ops = Layout { pages: &mut pages, y: &mut y, fonts: &fonts };
        ops.title_block(&self.title, &self.subtitle);
        for block in &self.blocks {
            match block {
                Block::Heading(t) => ops.heading(t),
                Block::Paragraph(t) => ops.paragraph(t),
                Block::Kpis(k) => ops.kpis(k),
                Block::Chart(c) => ops.chart(c),
                Block::Table(t) => ops.table(t),
            }
        }

        let mut doc = krilla::Document::new();
        doc.set_metadata(Metadata::new().title(self.title.clone()).creator("Postern".to_owned()));
        let total = pages.len();
        for (i, page_ops) in pages.iter().enumerate() {
            let settings = PageSettings::from_wh(PAGE_W, PAGE_H).ok_or_else(|| Error::Render("bad page size".into()))?;
            let mut page = doc.start_page_with(settings);
            let mut s = page.surface();
            for op in page_ops {
                op.draw(&mut s, &fonts);
            }
            let footer_y = PAGE_H - MARGIN + 10.0;
            Op::rect(MARGIN, footer_y - 12.0, CONTENT_W, 0.5, RULE).draw(&mut s, &fonts);
            Op::text(MARGIN, footer_y, 8.0, false, MUTED, &self.footer).draw(&mut s, &fonts);
            let n = format!("Page {} of {}", i + 1, total);
            let w = fonts.width(&n, 8.0, false);
            Op::text(PAGE_W - MARGIN - w, footer_y, 8.0, false, MUTED, &n).draw(&mut s, &fonts);
            s.finish();
            page.finish();
        }
        doc.finish().map_err(|e| Error::Render(format!("{e:?}")))
    }
}

struct Fonts {
    regular: Font,
    bold: Font,
    regular_ref: FontRef<'static>,
    bold_ref: FontRef<'static>,
}

impl Fonts {
    fn load() -> Result<Fonts> {
        let bad = |what: &str| Error::Render(format!("the embedded {what} font cannot be read"));
        Ok(Fonts {
            regular: Font::new(REGULAR.into(), 0).ok_or_else(|| bad("regular"))?,
            bold: Font::new(BOLD.into(), 0).ok_or_else(|| bad("bold"))?,
            regular_ref: FontRef::new(REGULAR).map_err(|_| bad("regular"))?,
            bold_ref: FontRef::new(BOLD).map_err(|_| bad("bold"))?,
        })
    }

    /// The advance width of `text` at `size` points.
    fn width(&self, text: &str, size: f32, bold: bool) -> f32 {
        let font = if bold { &self.bold_ref } else { &self.regular_ref };
        let charmap = font.charmap();
        let metrics = font.glyph_metrics(Size::new(size), LocationRef::default());
        text.chars()
            .map(|c| charmap.map(c).and_then(|g| metrics.advance_width(g)).unwrap_or(size * 0.6))
            .sum()
    }
}

/// One drawing operation, recorded during layout and replayed per page.
enum Op {
    Text { x: f32, y: f32, size: f32, bold: bool, color: Rgb, text: String },
    Rect { x: f32, y: f32, w: f32, h: f32, color: Rgb },
    Line { points: Vec<(f32, f32)>, width: f32, color: Rgb },
}

impl Op {
    fn text(x: f32, y: f32, size: f32, bold: bool, color: Rgb, text: &str) -> Op {
        Op::Text { x, y, size, bold, color, text: text.to_owned() }
    }

    fn rect(x: f32, y: f32, w: f32, h: f32, color: Rgb) -> Op {
        Op::Rect { x, y, w, h, color }
    }

    fn draw(&self, s: &mut Surface<'_>, fonts: &Fonts) {
        match self {
            Op::Text { x, y, size, bold, color, text } => {
                s.set_stroke(None);
                s.set_fill(Some(fill(*color)));
                let font = if *bold { fonts.bold.clone() } else { fonts.regular.clone() };
                s.draw_text(Point::from_xy(*x, *y), font, *size, text, false, TextDirection::LeftToRight);
            }
            Op::Rect { x, y, w, h, color } => {
                let Some(rect) = Rect::from_xywh(*x, *y, w.max(0.1), h.max(0.1)) else { return };
                let mut pb = PathBuilder::new();
                pb.push_rect(rect);
                if let Some(path) = pb.finish() {
                    s.set_stroke(None);
                    s.set_fill(Some(fill(*color)));
                    s.draw_path(&path);
                }
            }
            Op::Line { points, width, color } => {
                let mut pb = PathBuilder::new();
                for (i, (x, y)) in points.iter().enumerate() {
                    if i == 0 {
                        pb.move_to(*x, *y);
                    } else {
                        pb.line_to(*x, *y);
                    }
                }
                if let Some(path) = pb.finish() {
                    s.set_fill(None);
                    s.set_stroke(Some(Stroke { paint: rgb::Color::new(color.0, color.1, color.2).into(), width: *width, ..Stroke::default() }));
                    s.draw_path(&path);
                }
            }
        }
    }
}

fn fill((r, g, b): Rgb) -> Fill {
    Fill { paint: rgb::Color::new(r, g, b).into(), opacity: NormalizedF32::ONE, rule: Default::default() }
}

/// The cursor over the pages being laid out.
struct Layout<'a> {
    pages: &'a mut Vec<Vec<Op>>,
    y: &'a mut f32,
    fonts: &'a Fonts,
}

impl Layout<'_> {
    fn push(&mut self, op: Op) {
        if let Some(page) = self.pages.last_mut() {
            page.push(op);
        }
    }

    /// Starts a new page unless `height` still fits on this one.
    fn reserve(&mut self, height: f32) {
        if *self.y + height > BOTTOM && *self.y > MARGIN {
            self.pages.push(Vec::new());
            *self.y = MARGIN;
        }
    }

    fn title_block(&mut self, title: &str, subtitle: &[String]) {
        self.push(Op::rect(MARGIN, *self.y, 36.0, 4.0, ACCENT));
        *self.y += 30.0;
        for line in wrap(self.fonts, title, 22.0, true, CONTENT_W) {
            self.push(Op::text(MARGIN, *self.y, 22.0, true, INK, &line));
            *self.y += 28.0;
        }
        for line in subtitle {
            self.push(Op::text(MARGIN, *self.y - 6.0, 10.5, false, MUTED, line));
            *self.y += 15.0;
        }
        *self.y += GAP;
    }

    fn heading(&mut self, text: &str) {
        // Keep a heading with at least a few lines of what follows it.
        self.reserve(24.0 + 60.0);
        *self.y += 16.0;
        self.push(Op::text(MARGIN, *self.y, 13.0, true, INK, text));
        *self.y += 10.0;
    }

    fn paragraph(&mut self, text: &str) {
        for line in wrap(self.fonts, text, 10.0, false, CONTENT_W) {
            self.reserve(14.0);
            *self.y += 14.0;
            self.push(Op::text(MARGIN, *self.y - 3.0, 10.0, false, INK, &line));
        }
        *self.y += GAP / 2.0;
    }

    fn kpis(&mut self, tiles: &[Kpi]) {
        const H: f32 = 68.0;
        // At most four per row, spread evenly over the rows (six make two rows of three).
        let rows = tiles.len().div_ceil(4).max(1);
        for row in tiles.chunks(tiles.len().div_ceil(rows).max(1)) {
            self.reserve(H + GAP);
            let n = row.len().max(2) as f32;
            let w = (CONTENT_W - (n - 1.0) * 10.0) / n;
            for (i, k) in row.iter().enumerate() {
                let x = MARGIN + i as f32 * (w + 10.0);
                let top = *self.y;
                self.push(Op::rect(x, top, w, H, TILE));
                self.push(Op::rect(x, top, 3.0, H, ACCENT));
                self.push(Op::text(x + 12.0, top + 17.0, 8.0, false, MUTED, &k.label.to_uppercase()));
                let size = fit(self.fonts, &k.value, 20.0, true, w - 20.0);
                self.push(Op::text(x + 12.0, top + 42.0, size, true, INK, &k.value));
                if let Some(note) = &k.note {
                    let size = fit(self.fonts, note, 8.0, false, w - 20.0);
                    self.push(Op::text(x + 12.0, top + 58.0, size, false, MUTED, note));
                }
            }
            *self.y += H + GAP;
        }
    }

    fn chart(&mut self, chart: &Chart) {
        const H: f32 = 170.0;
        const AXIS_W: f32 = 40.0;
        self.reserve(H + 20.0 + GAP);
        let top = *self.y + 6.0;
        let left = MARGIN + AXIS_W;
        let width = CONTENT_W - AXIS_W;
        let max = nice_max(chart.values.iter().copied().fold(0.0, f64::max));
        // Four gridlines with their values on the left axis.
        for i in 0..=4 {
            let v = max * f64::from(i) / 4.0;
            let gy = top + H - H * i as f32 / 4.0;
            self.push(Op::rect(left, gy, width, 0.6, RULE));
            let label = compact(v);
            let lw = self.fonts.width(&label, 7.5, false);
            self.push(Op::text(left - 6.0 - lw, gy + 2.5, 7.5, false, MUTED, &label));
        }
        let n = chart.values.len().max(1);
        let slot = width / n as f32;
        let y_of = |v: f64| top + H - (H as f64 * (v / max)) as f32;
        match chart.kind {
            ChartKind::Bars => {
                let bar = (slot * 0.7).max(0.5);
                for (i, v) in chart.values.iter().enumerate() {
                    let x = left + i as f32 * slot + (slot - bar) / 2.0;
                    let y = y_of(*v);
                    self.push(Op::rect(x, y, bar, top + H - y, ACCENT));
                }
            }
            ChartKind::Line => {
                let points =
                    chart.values.iter().enumerate().map(|(i, v)| (left + (i as f32 + 0.5) * slot, y_of(*v))).collect();
                self.push(Op::Line { points, width: 1.8, color: ACCENT });
            }
        }
        // At most eight evenly spaced labels along the x axis, always the first and last.
        let labels = chart.labels.len();
        if labels > 0 {
            let step = labels.div_ceil(8).max(1);
            let mut shown: Vec<usize> = (0..labels).step_by(step).collect();
            if shown.last() != Some(&(labels - 1)) {
                if shown.len() > 1 && labels - 1 - shown[shown.len() - 1] < step / 2 + 1 {
                    shown.pop();
                }
                shown.push(labels - 1);
            }
            for i in shown {
                let label = &chart.labels[i];
                let lw = self.fonts.width(label, 7.5, false);
                let cx = left + (i as f32 + 0.5) * slot;
                let x = (cx - lw / 2.0).clamp(left, left + width - lw);
                self.push(Op::text(x, top + H + 12.0, 7.5, false, MUTED, label));
            }
        }
        *self.y = top + H + 20.0 + GAP;
    }

    fn table(&mut self, table: &Table) {
        const ROW: f32 = 18.0;
        const SIZE: f32 = 9.0;
        const PAD: f32 = 8.0;
        let widths = column_widths(self.fonts, table, SIZE, PAD);
        let header = |l: &mut Layout<'_>| {
            let top = *l.y;
            let mut x = MARGIN;
            for ((title, align), w) in table.columns.iter().zip(&widths) {
                l.cell(x, top + 12.5, *w, (title, *align), (SIZE - 0.5, true, MUTED));
                x += w;
            }
            l.push(Op::rect(MARGIN, top + ROW - 1.0, CONTENT_W, 1.0, INK));
            *l.y += ROW;
        };
        self.reserve(ROW * 3.0);
        header(self);
        for (r, row) in table.rows.iter().enumerate() {
            if *self.y + ROW > BOTTOM {
                self.reserve(ROW * 2.0);
                header(self);
            }
            let top = *self.y;
            if r % 2 == 1 {
                self.push(Op::rect(MARGIN, top, CONTENT_W, ROW, ZEBRA));
            }
            let mut x = MARGIN;
            for ((cell, (_, align)), w) in row.iter().zip(&table.columns).zip(&widths) {
                self.cell(x, top + 12.5, *w, (cell, *align), (SIZE, false, INK));
                x += w;
            }
            *self.y += ROW;
        }
        self.push(Op::rect(MARGIN, *self.y, CONTENT_W, 0.6, RULE));
        *self.y += GAP;
    }

    /// One table cell's text, with a style of (size, bold, colour).
    fn cell(&mut self, x: f32, baseline: f32, w: f32, (text, align): (&str, Align), (size, bold, color): (f32, bool, Rgb)) {
        let text = truncate(self.fonts, text, size, bold, w - 12.0);
        let x = match align {
            Align::Left => x + 4.0,
            Align::Right => x + w - 4.0 - self.fonts.width(&text, size, bold),
        };
        self.push(Op::text(x, baseline, size, bold, color, &text));
    }
}

/// Column widths: each column's natural width; what is left goes to the
/// first column, and when too wide every column shrinks in proportion.
fn column_widths(fonts: &Fonts, table: &Table, size: f32, pad: f32) -> Vec<f32> {
    let mut widths: Vec<f32> = table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (title, _))| {
            let cells = table.rows.iter().map(|r| fonts.width(&r[i], size, false));
            cells.fold(fonts.width(title, size - 0.5, true), f32::max) + 2.0 * pad
        })
        .collect();
    let total: f32 = widths.iter().sum();
    if total <= CONTENT_W {
        if let Some(first) = widths.first_mut() {
            *first += CONTENT_W - total;
        }
    } else {
        widths.iter_mut().for_each(|w| *w *= CONTENT_W / total);
    }
    widths
}

/// Greedy word wrap to `max` points.
fn wrap(fonts: &Fonts, text: &str, size: f32, bold: bool, max: f32) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split_whitespace() {
            let candidate = if line.is_empty() { word.to_owned() } else { format!("{line} {word}") };
            if fonts.width(&candidate, size, bold) > max && !line.is_empty() {
                lines.push(std::mem::replace(&mut line, word.to_owned()));
            } else {
                line = candidate;
            }
        }
        lines.push(line);
    }
    lines
}

/// The largest size up to `size` at which `text` fits in `max` points.
fn fit(fonts: &Fonts, text: &str, size: f32, bold: bool, max: f32) -> f32 {
    let w = fonts.width(text, size, bold);
    if w <= max {
        size
    } else {
        (size * max / w).max(5.0)
    }
}

/// `text` shortened with an ellipsis to fit in `max` points.
fn truncate(fonts: &Fonts, text: &str, size: f32, bold: bool, max: f32) -> String {
    if fonts.width(text, size, bold) <= max {
        return text.to_owned();
    }
    let mut out: String = text.to_owned();
    while !out.is_empty() && fonts.width(&format!("{out}…"), size, bold) > max {
        out.pop();
    }
    format!("{out}…")
}

/// A round axis maximum at or above `v` (1, 2 or 5 times a power of ten).
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 4.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * magnitude).find(|m| *m >= v).unwrap_or(10.0 * magnitude)
}

/// An axis label: 1200 → "1.2k", 3000000 → "3M".
fn compact(v: f64) -> String {
    let (n, suffix) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{n:.1}");
    format!("{}{suffix}", s.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(0.0), 4.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(2000.0), 2000.0);
        assert_eq!(compact(2500.0), "2.5k");
        assert_eq!(compact(3_000_000.0), "3M");
        assert_eq!(compact(50.0), "50");
    }

    #[test]
    fn long_text_wraps_and_truncates_within_the_width() {
        let fonts = Fonts::load().unwrap();
        let text = "word ".repeat(200);
        let lines = wrap(&fonts, &text, 10.0, false, 200.0);
        assert!(lines.len() > 5);
        assert!(lines.iter().all(|l| fonts.width(l, 10.0, false) <= 200.0));
        let t = truncate(&fonts, &text, 9.0, false, 80.0);
        assert!(t.ends_with('…') && fonts.width(&t, 9.0, false) <= 80.0);
    }

    #[test]
    fn renders_with_embedded_fonts() {
        let mut doc = Document::new("Quarterly report");
        doc.subtitle("example.com · 2026-01-01 to 2026-03-31");
        doc.kpis(vec![Kpi::new("Sessions", "12,345").note("+3% vs before"), Kpi::new("Conversions", "321")]);
        doc.chart(Chart { kind: ChartKind::Bars, labels: vec!["a".into(), "b".into()], values: vec![1.0, 3.0] });
        let mut table = Table::new(&[("Country", Align::Left), ("Sessions", Align::Right)]);
        for i in 0..120 {
            table.row([format!("C{i}"), i.to_string()]);
        }
        doc.table(table);
        doc.paragraph("Done.");
        let pdf = doc.render().unwrap();
        assert!(pdf.starts_with(b"%PDF-"));
        let text = String::from_utf8_lossy(&pdf);
        // Fonts are embedded (as subset font programs), never referenced by name only.
        assert!(text.contains("/FontFile2") || text.contains("/FontFile3"));
    }
}
