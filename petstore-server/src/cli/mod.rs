//! The `petstore-server` command line (the binary's, not the library's).

pub mod keys;
pub mod settings;
pub mod webhooks;

/// Prints `header` and `rows` as columns two spaces apart, each as wide as
/// its widest cell (what `keys list` and `webhooks list` print).
fn print_table<const N: usize>(header: &[String; N], rows: &[[String; N]]) {
    let widths: Vec<usize> = (0..N)
        .map(|i| {
            std::iter::once(header)
                .chain(rows)
                .map(|row| row[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(header).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
