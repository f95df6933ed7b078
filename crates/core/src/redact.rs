//! Parse errors of files that hold secrets (a web config's bcrypt hashes, a BMC password, a
//! kubeconfig's token), rewritten so that they quote nothing the file says.
//!
//! serde's messages quote the input in several places: a misplaced value (`invalid type:
//! string "…"`, `integer `…``), an unknown key (`unknown field `…``), a duplicate key, and
//! the path of keys in front of the message. One byte off — `password:'secret'` without the
//! space — turns a secret into a key, so hiding values alone is not enough. What is kept is
//! what the program itself wrote: the kind of error, what the schema expected, and the line
//! and column, which is enough to find the mistake in the file.

/// serde's standard error kinds, as the message starts after the key path.
const KINDS: [(&str, Kind); 9] = [
    ("unknown field `", Kind::UnknownField),
    ("unknown variant `", Kind::UnknownVariant),
    ("invalid type: ", Kind::InvalidType),
    ("invalid value: ", Kind::InvalidValue),
    ("invalid length ", Kind::InvalidLength),
    ("missing field `", Kind::MissingField),
    ("duplicate field `", Kind::DuplicateField),
    ("duplicate entry ", Kind::DuplicateEntry),
    ("deserializing nested enum", Kind::NestedEnum),
];

/// What serde's `Unexpected` calls the value it got, before the value itself.
const UNEXPECTED: [&str; 16] = [
    "string",
    "integer",
    "floating point",
    "boolean",
    "character",
    "byte array",
    "unit value",
    "unit variant",
    "newtype variant",
    "tuple variant",
    "struct variant",
    "newtype struct",
    "Option value",
    "sequence",
    "map",
    "enum",
];

#[derive(Clone, Copy)]
enum Kind {
    UnknownField,
    UnknownVariant,
    InvalidType,
    InvalidValue,
    InvalidLength,
    MissingField,
    DuplicateField,
    DuplicateEntry,
    NestedEnum,
}

/// Rewrites a YAML (or JSON) deserialisation message so that it keeps only the program's own
/// words: the error kind, the schema's field names and expectations, and `line_column` (from
/// the parser's location, 1-based). A key the file misspelt is named only when it is a plain
/// lower-case identifier, as every field of these files is; anything else the file wrote is
/// left out.
pub fn yaml_error_without_values(message: &str, line_column: Option<(usize, usize)>) -> String {
    let at = line_column.map_or_else(String::new, |(line, column)| {
        format!(" at line {line} column {column}")
    });
    let found = KINDS
        .iter()
        .filter_map(|&(mark, kind)| message.find(mark).map(|i| (i, mark, kind)))
        .min_by_key(|&(i, _, _)| i);
    let Some((start, mark, kind)) = found else {
        return format!("{}{at}", syntax_problem(message));
    };
    // The region after the mark: the value or name the message is about, then what was
    // expected. The path of keys in front of the mark is never kept.
    let rest = message.get(start + mark.len()..).unwrap_or("");
    let said = match kind {
        Kind::UnknownField | Kind::UnknownVariant => {
            let what = if matches!(kind, Kind::UnknownField) {
                "unknown field"
            } else {
                "unknown variant"
            };
            match rest.split('`').next().filter(|name| plain_identifier(name)) {
                Some(name) => format!("{what} `{name}`"),
                None => format!("{what} (its name is not shown: it is not a plain identifier)"),
            }
        }
        Kind::InvalidType | Kind::InvalidValue => {
            let what = if matches!(kind, Kind::InvalidType) {
                "invalid type"
            } else {
                "invalid value"
            };
            match UNEXPECTED.iter().find(|u| rest.starts_with(*u)) {
                Some(unexpected) => format!("{what}: {unexpected}"),
                None => what.to_string(),
            }
        }
        Kind::InvalidLength => {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            format!("invalid length {digits}")
        }
        // serde's derive names these fields from the schema, never from the input.
        Kind::MissingField | Kind::DuplicateField => {
            let what = if matches!(kind, Kind::MissingField) {
                "missing field"
            } else {
                "duplicate field"
            };
            match rest.split('`').next().filter(|name| plain_identifier(name)) {
                Some(name) => format!("{what} `{name}`"),
                None => what.to_string(),
            }
        }
        Kind::DuplicateEntry => "duplicate key in a map".to_string(),
        Kind::NestedEnum => "a nested YAML tag is not supported".to_string(),
    };
    format!(
        "{}{said}{}{at}",
        key_path(message.get(..start).unwrap_or("")),
        expected(rest, line_column.is_some())
    )
}

/// serde_yaml writes the path of keys in front of the message (`bmcs.b.insecure: `). It is
/// kept only when every key in it is a plain identifier or a list index.
fn key_path(prefix: &str) -> String {
    let Some(path) = prefix.strip_suffix(": ") else {
        return String::new();
    };
    let plain = path.split('.').all(|segment| {
        let key = segment.split('[').next().unwrap_or("");
        let indexes_ok = segment
            .get(key.len()..)
            .unwrap_or("")
            .chars()
            .all(|c| c.is_ascii_digit() || c == '[' || c == ']');
        plain_identifier(key) && indexes_ok
    });
    if plain {
        format!("{path}: ")
    } else {
        String::new()
    }
}

/// serde ends a message with `, expected …`, written from the schema. A value quoted before
/// it may itself contain that text, so the last one counts; it is kept only when it reads
/// like a schema's words.
fn expected(rest: &str, has_location: bool) -> String {
    const MARK: &str = ", expected ";
    let Some(i) = rest.rfind(MARK) else {
        return String::new();
    };
    let mut text = rest.get(i + MARK.len()..).unwrap_or("");
    if has_location {
        if let Some(j) = text.rfind(" at line ") {
            text = text.get(..j).unwrap_or("");
        }
    }
    let schema_like = text.len() <= 400
        && text.split('`').enumerate().all(|(n, part)| {
            if n % 2 == 1 {
                plain_identifier(part)
            } else {
                part.chars()
                    .all(|c| c.is_ascii_alphanumeric() || " ,_()-".contains(c))
            }
        });
    if schema_like && !text.is_empty() {
        format!(", expected {text}")
    } else {
        String::new()
    }
}

/// A syntax error comes from the YAML parser's own fixed texts, behind serde_yaml's key path
/// when there is one (those texts contain no `": "`). Kept only in the parser's alphabet.
fn syntax_problem(message: &str) -> String {
    let mut text = message;
    if let Some(j) = text.rfind(" at line ") {
        text = text.get(..j).unwrap_or("");
    }
    if let Some(i) = text.rfind(": ") {
        text = text.get(i + 2..).unwrap_or("");
    }
    let parser_words = text.len() <= 200
        && text.split(' ').all(|word| {
            ["YAML", "UTF-8", "URI", "BOM"].contains(&word)
                || word.chars().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || ",;'<>.!:[]{}-".contains(c)
                })
        });
    if parser_words && !text.is_empty() {
        text.to_string()
    } else {
        "not valid YAML for this file".to_string()
    }
}

fn plain_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_kind_schema_and_place() {
        let m = "tls_server_config: unknown field `cert_fil`, expected one of `cert_file`, \
                 `key_file` at line 3 column 3";
        assert_eq!(
            yaml_error_without_values(m, Some((3, 3))),
            "tls_server_config: unknown field `cert_fil`, expected one of `cert_file`, `key_file` at line 3 column 3"
        );
        let m = "bmcs.b: missing field `endpoint` at line 3 column 5";
        assert_eq!(
            yaml_error_without_values(m, Some((3, 5))),
            "bmcs.b: missing field `endpoint` at line 3 column 5"
        );
        let m = "users[2].x: invalid type: map, expected a string";
        assert_eq!(
            yaml_error_without_values(m, None),
            "users[2].x: invalid type: map, expected a string"
        );
        let m = "mapping values are not allowed in this context at line 2 column 8";
        assert_eq!(
            yaml_error_without_values(m, Some((2, 8))),
            "mapping values are not allowed in this context at line 2 column 8"
        );
    }

    /// The shapes that leaked before: a secret glued to its key, a secret become a key in
    /// the path, a secret as a misplaced value of every type, a duplicate key, a tag.
    #[test]
    fn quotes_nothing_the_file_says() {
        let s = "Pw5ecretX";
        let cases = [
            format!("unknown field `client_allowed_sans:'{s}'`, expected one of `a`, `b` at line 1 column 1"),
            format!("nodes.{s} bmcs: invalid type: string \"x\", expected a map at line 1 column 8"),
            format!("bmcs.b.insecure: invalid type: string \"{s}\", expected a boolean at line 5 column 15"),
            "bmcs.b.insecure: invalid type: integer `99887766`, expected a boolean at line 5 column 15".to_string(),
            format!("basic_auth_users: duplicate entry with key \"{s}\" at line 2 column 3"),
            format!("deserializing nested enum in !{s} from YAML is not supported yet"),
            format!("unknown field `x`, expected `{s}, expected one of `a` at line 1 column 1"),
            format!("{s}: recursion limit exceeded at line 9 column 1"),
            format!("a.{s}: some custom text {s} at line 9 column 1"),
            format!("invalid type: string \"{s}, expected {s}\", expected a map"),
        ];
        for m in cases {
            let out = yaml_error_without_values(&m, Some((1, 1)));
            assert!(!out.contains(s), "{m} -> {out}");
            assert!(!out.contains("99887766"), "{m} -> {out}");
        }
        let out = yaml_error_without_values(&format!("unknown variant `{s}`, expected `a`"), None);
        assert_eq!(
            out,
            "unknown variant (its name is not shown: it is not a plain identifier), expected `a`"
        );
    }
}
