//! A captured `nvidia-smi topo -m` output.
//!
//! The header line names the matrix columns (`GPU0 GPU1 ... NIC0 ...` or
//! NIC names) followed by `CPU Affinity`, and optionally `NUMA Affinity`
//! and `GPU NUMA ID`. Each `GPU<i>` row (in order, from `GPU0`) has one cell
//! per matrix column (`X` on the diagonal, else a link label) and then the
//! extra columns. Only the GPU×GPU part is used: NIC columns and rows, and
//! everything from the first line that is not a GPU row (the legend) on,
//! are ignored. Each GPU pair carries the one label nvidia-smi shows (an
//! `NV<k>` hides the PCIe level: scores from a capture count only that
//! label), its NUMA node is the `NUMA Affinity` column (`N/A`: none) and
//! its device id is `GPU-<i>` (a capture shows no UUIDs: use the JSON form
//! to name devices by UUID).
//!
//! Errors name the line (1-based) and the column: a ragged row, an unknown
//! label, a diagonal cell other than `X`, a pair whose two cells differ, a
//! missing or repeated GPU row.

use topomgr_sdk::NumaNodeId;

use super::ParseError;
use crate::link::Link;
use crate::topology::{gpu_label, Gpu, GpuTopology};

/// The columns after the matrix that nvidia-smi prints, in its order.
const EXTRA_COLUMNS: [&str; 3] = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"];

/// Parses a capture.
pub fn parse(text: &str) -> Result<GpuTopology, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let header_at = lines
        .iter()
        .position(|l| !l.trim().is_empty())
        .ok_or_else(|| ParseError::new("line 1", "empty file"))?;
    let header = Header::parse(lines[header_at], header_at + 1)?;
    let gpus_in_header = header.gpu_columns();

    let mut rows: Vec<Row> = Vec::new();
    for (at, line) in lines.iter().enumerate().skip(header_at + 1) {
        let number = at + 1;
        let mut fields = line.split_whitespace();
        let Some(label) = fields.next() else {
            break;
        };
        let Some(index) = gpu_index(label) else {
            break;
        };
        if index != rows.len() {
            return Err(ParseError::new(
                format!("line {number}"),
                format!(
                    "row {label} where {} was expected (GPU rows are GPU0, GPU1, ... in order)",
                    gpu_label(rows.len())
                ),
            ));
        }
        let cells: Vec<&str> = fields.collect();
        let expected = header.columns.len() + header.extras.len();
        if cells.len() != expected {
            return Err(ParseError::new(
                format!("line {number}"),
                format!(
                    "row {label} has {} fields after its label, but the header has {} matrix columns and {} more ({})",
                    cells.len(),
                    header.columns.len(),
                    header.extras.len(),
                    header.extras.join(", ")
                ),
            ));
        }
        let (matrix, extras) = cells.split_at(header.columns.len());
        let numa = match header.extras.iter().position(|e| *e == "NUMA Affinity") {
            None => None,
            Some(k) => parse_numa(extras[k]).ok_or_else(|| {
                ParseError::new(
                    format!("line {number}, column NUMA Affinity"),
                    format!("`{}` is not a NUMA node id or N/A", extras[k]),
                )
            })?,
        };
        rows.push(Row {
            line: number,
            cells: matrix[..gpus_in_header]
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
            numa,
        });
    }
    if rows.is_empty() {
        return Err(ParseError::new(
            format!("line {}", header_at + 2),
            "no GPU rows after the header (GPU0 ...)",
        ));
    }
    if rows.len() != gpus_in_header {
        return Err(ParseError::new(
            format!("line {}", rows[rows.len() - 1].line + 1),
            format!(
                "{} GPU rows, but the header has {gpus_in_header} GPU columns",
                rows.len()
            ),
        ));
    }

    let gpus = rows
        .iter()
        .enumerate()
        .map(|(index, row)| Gpu {
            index,
            id: format!("GPU-{index}"),
            numa: row.numa,
            pci: None,
        })
        .collect();
    let mut topology = GpuTopology::new(gpus)
        .map_err(|e| ParseError::new(format!("line {}", header_at + 1), e.to_string()))?;
    for (a, row) in rows.iter().enumerate() {
        for (b, cell) in row.cells.iter().enumerate() {
            let location = || format!("line {}, column {}", row.line, gpu_label(b));
            if a == b {
                if cell != "X" {
                    return Err(ParseError::new(
                        location(),
                        format!("`{cell}` on the diagonal, where nvidia-smi prints X"),
                    ));
                }
                continue;
            }
            let link: Link = cell
                .parse()
                .map_err(|e| ParseError::new(location(), format!("{e}")))?;
            let mirror = &rows[b].cells[a];
            if mirror != cell {
                return Err(ParseError::new(
                    location(),
                    format!(
                        "{} to {} is {cell}, but line {} says {} to {} is {mirror}: links are symmetric",
                        gpu_label(a),
                        gpu_label(b),
                        rows[b].line,
                        gpu_label(b),
                        gpu_label(a)
                    ),
                ));
            }
            if a < b {
                topology
                    .add_link(a, b, link)
                    .map_err(|e| ParseError::new(location(), e.to_string()))?;
            }
        }
    }
    Ok(topology)
}

struct Row {
    line: usize,
    /// The GPU columns' cells.
    cells: Vec<String>,
    numa: Option<NumaNodeId>,
}

struct Header {
    /// Matrix column labels (GPUs first, then NICs).
    columns: Vec<String>,
    /// The extra columns present, in order.
    extras: Vec<&'static str>,
}

impl Header {
    fn parse(line: &str, number: usize) -> Result<Self, ParseError> {
        let location = format!("line {number}");
        let tokens: Vec<&str> = line.split_whitespace().collect();
        if tokens.first() != Some(&"GPU0") {
            return Err(ParseError::new(
                location,
                "neither a JSON topology (no `{`) nor an `nvidia-smi topo -m` capture (its header line starts with GPU0)",
            ));
        }
        let matrix_end = tokens
            .iter()
            .position(|t| *t == "CPU")
            .unwrap_or(tokens.len());
        let columns: Vec<String> = tokens[..matrix_end]
            .iter()
            .map(|t| (*t).to_owned())
            .collect();
        let mut rest = tokens[matrix_end..].join(" ");
        let mut extras = Vec::new();
        for name in EXTRA_COLUMNS {
            if let Some(after) = rest.strip_prefix(name) {
                extras.push(name);
                rest = after.trim_start().to_owned();
            }
        }
        if !rest.is_empty() {
            return Err(ParseError::new(
                location,
                format!(
                    "unknown header column(s) `{rest}` (known after the matrix: {})",
                    EXTRA_COLUMNS.join(", ")
                ),
            ));
        }
        let header = Header { columns, extras };
        for (k, c) in header.columns.iter().enumerate().take(header.gpu_columns()) {
            if gpu_index(c) != Some(k) {
                return Err(ParseError::new(
                    location,
                    format!("column {c} where {} was expected", gpu_label(k)),
                ));
            }
        }
        Ok(header)
    }

    /// The number of leading `GPU<i>` columns.
    fn gpu_columns(&self) -> usize {
        self.columns
            .iter()
            .take_while(|c| gpu_index(c).is_some())
            .count()
    }
}

/// `i` of a `GPU<i>` label.
fn gpu_index(label: &str) -> Option<usize> {
    let digits = label.strip_prefix("GPU")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `Some(None)` for `N/A`, `Some(Some(n))` for a node id.
fn parse_numa(field: &str) -> Option<Option<NumaNodeId>> {
    if field == "N/A" {
        Some(None)
    } else {
        field.parse().ok().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::PcieLevel;

    const SMALL: &str = "\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV4\tSYS\tPIX\t0-7\t0\t\tN/A
GPU1\tNV4\t X \tPHB\tSYS\t0-7\t0\t\tN/A
GPU2\tSYS\tPHB\t X \tSYS\t8-15\tN/A\t\tN/A
NIC0\tPIX\tSYS\tSYS\t X

Legend:

  X    = Self
";

    #[test]
    fn a_capture_gives_one_label_per_pair_and_numa_affinity() {
        let t = parse(SMALL).unwrap();
        let gpus: Vec<_> = t
            .gpus()
            .iter()
            .map(|g| (g.id.as_str(), g.numa.map(u32::from)))
            .collect();
        assert_eq!(
            gpus,
            [("GPU-0", Some(0)), ("GPU-1", Some(0)), ("GPU-2", None)]
        );
        assert_eq!(t.links(0, 1).nvlinks, 4);
        assert_eq!(t.links(0, 1).pcie, None);
        assert_eq!(t.links(1, 2).pcie, Some(PcieLevel::HostBridge));
        assert_eq!(t.pair_score(0, 1), 400);
        assert_eq!(t.pair_score(0, 2), 10);
    }

    #[test]
    fn old_captures_without_numa_columns_parse() {
        let text = "        GPU0    GPU1    CPU Affinity\nGPU0     X      SOC     0-11\nGPU1    SOC      X      12-23\n";
        let t = parse(text).unwrap();
        assert_eq!(t.pair_score(0, 1), 10);
        assert_eq!(t.gpus()[1].numa, None);
    }

    fn err(text: &str) -> (String, String) {
        let e = parse(text).unwrap_err();
        (e.location, e.message)
    }

    #[test]
    fn malformed_captures_name_the_line_and_column() {
        let h = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n";
        let cases = [
            ("", ("line 1", "empty file")),
            (
                "hello\n",
                ("line 1", "neither a JSON topology (no `{`) nor an `nvidia-smi topo -m` capture (its header line starts with GPU0)"),
            ),
            (
                "\tGPU0\tGPU2\tCPU Affinity\n",
                ("line 1", "column GPU2 where GPU1 was expected"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tColour\n",
                ("line 1", "unknown header column(s) `Colour` (known after the matrix: CPU Affinity, NUMA Affinity, GPU NUMA ID)"),
            ),
            (h, ("line 2", "no GPU rows after the header (GPU0 ...)")),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tNV1\t0-1\t0\nGPU1\tNV1\tX\t0-1\n",
                ("line 3", "row GPU1 has 3 fields after its label, but the header has 2 matrix columns and 2 more (CPU Affinity, NUMA Affinity)"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tNV1\t0-1\t0\nGPU0\tNV1\tX\t0-1\t0\n",
                ("line 3", "row GPU0 where GPU1 was expected (GPU rows are GPU0, GPU1, ... in order)"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tNV1\t0-1\t0\n\nLegend\n",
                ("line 3", "1 GPU rows, but the header has 2 GPU columns"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tNV1\t0-1\t0\nGPU1\tNV1\tNV1\t0-1\t0\n",
                ("line 3, column GPU1", "`NV1` on the diagonal, where nvidia-smi prints X"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tNVL\t0-1\t0\nGPU1\tNVL\tX\t0-1\t0\n",
                ("line 2, column GPU1", "unknown link label `NVL` (known: SYS, SOC, NODE, PHB, PXB, PIX, BOARD, NV1..NV18)"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tPIX\t0-1\t0\nGPU1\tPXB\tX\t0-1\t0\n",
                ("line 2, column GPU1", "GPU0 to GPU1 is PIX, but line 3 says GPU1 to GPU0 is PXB: links are symmetric"),
            ),
            (
                "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\tX\tPIX\t0-1\tzero\nGPU1\tPIX\tX\t0-1\t0\n",
                ("line 2, column NUMA Affinity", "`zero` is not a NUMA node id or N/A"),
            ),
        ];
        for (text, (location, message)) in cases {
            assert_eq!(
                err(text),
                (location.to_owned(), message.to_owned()),
                "{text:?}"
            );
        }
    }

    /// The real captures in `../shared/gpu/` (read in place, never copied).
    /// For tests marked `#[ignore = "needs the nvidia-smi captures of
    /// ../shared/gpu"]`; fails when the capture cannot be read.
    fn capture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/gpu")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "needs the nvidia-smi captures: {} not readable ({e}; ../shared/gpu beside the repository)",
                path.display()
            )
        })
    }

    #[test]
    #[ignore = "needs the nvidia-smi captures of ../shared/gpu"]
    fn dgx_a100_capture() {
        let text = capture("nvidia-smi-topo-dgx-a100.txt");
        let t = parse(&text).unwrap();
        assert_eq!(t.len(), 8);
        let numa: Vec<_> = t.gpus().iter().map(|g| g.numa.map(u32::from)).collect();
        assert_eq!(
            numa,
            [3, 3, 1, 1, 7, 7, 5, 5].map(Some),
            "NUMA Affinity column"
        );
        for a in 0..8 {
            for b in 0..8 {
                if a != b {
                    assert_eq!(t.links(a, b).nvlinks, 12, "GPU{a}-GPU{b}");
                    assert_eq!(t.links(a, b).pcie, None, "GPU{a}-GPU{b}");
                }
            }
        }
    }

    #[test]
    #[ignore = "needs the nvidia-smi captures of ../shared/gpu"]
    fn on_a_capture_every_pair_ties_so_the_first_gpus_offered_win() {
        let text = capture("nvidia-smi-topo-dgx-a100.txt");
        let chooser =
            crate::choice::Chooser::new(parse(&text).unwrap(), crate::choice::Policy::BestEffort);
        let offered = ["GPU-6", "GPU-2", "GPU-7", "GPU-0", "GPU-3"];
        let none: [&str; 0] = [];
        assert_eq!(
            chooser.choose(&offered, &none, 2).unwrap(),
            ["GPU-6", "GPU-2"]
        );
        // With GPU-3 required, the first valid partition is {6,2} {7,3}
        // {0,pad}: upstream's order, not "GPU-3 plus the first offered".
        assert_eq!(
            chooser.choose(&offered, &["GPU-3"], 2).unwrap(),
            ["GPU-7", "GPU-3"]
        );
    }

    #[test]
    #[ignore = "needs the nvidia-smi captures of ../shared/gpu"]
    fn hgx_h20_capture() {
        let text = capture("nvidia-smi-topo-hgx-h20.txt");
        let t = parse(&text).unwrap();
        assert_eq!(t.len(), 8);
        let numa: Vec<_> = t.gpus().iter().map(|g| g.numa.map(u32::from)).collect();
        assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
        assert!((0..8).all(|a| (0..8).all(|b| a == b || t.pair_score(a, b) == 1800)));
    }
}
