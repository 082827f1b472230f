//! Known cases (ringers): reading the arguments of a CORE-MATH worst-case file (`.wc`) or a
//! list of C99 hexadecimal arguments, before the server verifies each with MPFR.

use crate::error::{Error, Result};

/// Most known cases one request may load.
pub const MAX_KNOWN_CASES: usize = 100_000;

/// The arguments of `lines`: each line's first field (fields are separated by blanks or
/// commas; CORE-MATH's `.wc` lines may carry a second argument or the expected result), with
/// `#` comments and blank lines skipped. Anything that is not a number is refused with its line
/// number, so a wrong file is not loaded half.
pub fn parse_lines(lines: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let body = line.split('#').next().unwrap_or("").trim();
        let Some(x) = body
            .split(|c: char| c.is_whitespace() || c == ',')
            .find(|f| !f.is_empty())
        else {
            continue;
        };
        if x.len() > 64 || !crate::domain::is_number_text(x) {
            return Err(Error::BadRequest(format!(
                "line {}: {:?} is not a number (C99 hex or decimal, at most 64 characters)",
                n + 1,
                x.chars().take(80).collect::<String>()
            )));
        }
        out.push(x.to_string());
    }
    if out.len() > MAX_KNOWN_CASES {
        return Err(Error::BadRequest(format!(
            "at most {MAX_KNOWN_CASES} known cases per request, got {}; split the file",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(String::from).collect()
    }

    #[test]
    fn wc_lines_give_their_first_argument() {
        let got = parse_lines(&lines(
            "# exp worst cases\n0x1.62e43p-1\n\n  -0x1.9d1d9ep-28  # hard\n0x1.8p+0,0x1p+0\n\
             0x1.4p+0 0x1.2p+1\n",
        ))
        .unwrap();
        assert_eq!(
            got,
            ["0x1.62e43p-1", "-0x1.9d1d9ep-28", "0x1.8p+0", "0x1.4p+0"]
        );
    }

    #[test]
    fn a_line_that_is_not_a_number_is_refused_with_its_number() {
        let e = parse_lines(&lines("0x1p+0\n$(reboot)\n")).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(parse_lines(&lines(&"1\n".repeat(MAX_KNOWN_CASES + 1))).is_err());
    }
}
