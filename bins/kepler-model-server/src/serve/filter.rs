//! The legacy API's `filter`: conditions on a model's accuracy, such as `mae<=10`.
//!
//! Accepted forms, combined with `;`, `,`, `&` or `:` between conditions:
//! `mae<=10`, `mae<10`, `mape>=1`, `mae==3`, and the upstream spellings `mae=10` and
//! `mae:10`, which mean "at most" (lower errors are better). Attributes are `mae`, `mape`
//! (the worst component's, see [`super::types::Accuracy`]) and `<component>_mae`,
//! `<component>_mape`. A model without the figure a condition names fails that condition.
//!
//! Upstream's filters rejected every model (DESIGN §7): it looked the attribute up as a
//! Python attribute of a dict. Here a condition that no model passes gives a 400 naming it.

use std::fmt;

use super::types::Accuracy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Mae,
    Mape,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Le,
    Lt,
    Ge,
    Gt,
    Eq,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// `None`: the model's overall (worst-component) figure.
    pub component: Option<String>,
    pub metric: Metric,
    pub op: Op,
    pub value: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub conditions: Vec<Condition>,
}

impl Filter {
    pub fn parse(text: &str) -> Result<Filter, String> {
        let mut conditions = Vec::new();
        let mut rest = text;
        loop {
            rest = rest.trim_start_matches(|c: char| c.is_whitespace() || ";,&:".contains(c));
            if rest.is_empty() {
                break;
            }
            let attr_end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let (attr, after) = rest.split_at(attr_end);
            let (component, metric) = parse_attribute(attr)?;
            let after = after.trim_start();
            let (op, after) = [
                ("<=", Op::Le),
                (">=", Op::Ge),
                ("==", Op::Eq),
                ("<", Op::Lt),
                (">", Op::Gt),
                ("=", Op::Le),
                (":", Op::Le),
            ]
            .into_iter()
            .find_map(|(s, op)| after.strip_prefix(s).map(|a| (op, a)))
            .ok_or_else(|| format!("filter: expected <=, <, >=, >, ==, = or : after {attr:?}"))?;
            let after = after.trim_start();
            let num_end = after
                .find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c)))
                .unwrap_or(after.len());
            let (number, after) = after.split_at(num_end);
            let value: f64 = number
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| format!("filter: {attr} needs a number, found {number:?}"))?;
            conditions.push(Condition {
                component,
                metric,
                op,
                value,
            });
            rest = after;
            if !rest.is_empty()
                && !rest.starts_with(|c: char| c.is_whitespace() || ";,&:".contains(c))
            {
                return Err(format!("filter: unexpected {rest:?} after {attr}{number}"));
            }
        }
        Ok(Filter { conditions })
    }

    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    pub fn accepts(&self, accuracy: &Accuracy) -> bool {
        self.conditions.iter().all(|c| c.accepts(accuracy))
    }
}

fn parse_attribute(attr: &str) -> Result<(Option<String>, Metric), String> {
    let metric_of = |m: &str| match m {
        "mae" => Some(Metric::Mae),
        "mape" => Some(Metric::Mape),
        _ => None,
    };
    if let Some(m) = metric_of(attr) {
        return Ok((None, m));
    }
    match attr.rsplit_once('_') {
        Some((component, m)) if !component.is_empty() => match metric_of(m) {
            Some(metric) => Ok((Some(component.to_string()), metric)),
            None => Err(unknown(attr)),
        },
        _ => Err(unknown(attr)),
    }
}

fn unknown(attr: &str) -> String {
    format!(
        "filter: unknown attribute {attr:?}; use mae, mape, or <component>_mae / <component>_mape"
    )
}

impl Condition {
    pub fn accepts(&self, accuracy: &Accuracy) -> bool {
        let figures = match &self.component {
            None => (accuracy.mae, accuracy.mape),
            Some(c) => accuracy
                .components
                .get(c)
                .map_or((None, None), |c| (c.mae, c.mape)),
        };
        let Some(v) = (match self.metric {
            Metric::Mae => figures.0,
            Metric::Mape => figures.1,
        }) else {
            return false;
        };
        match self.op {
            Op::Le => v <= self.value,
            Op::Lt => v < self.value,
            Op::Ge => v >= self.value,
            Op::Gt => v > self.value,
            Op::Eq => v == self.value,
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = &self.component {
            write!(f, "{c}_")?;
        }
        let metric = match self.metric {
            Metric::Mae => "mae",
            Metric::Mape => "mape",
        };
        let op = match self.op {
            Op::Le => "<=",
            Op::Lt => "<",
            Op::Ge => ">=",
            Op::Gt => ">",
            Op::Eq => "==",
        };
        write!(f, "{metric}{op}{}", self.value)
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accuracy(mae: f64, mape: f64, package_mae: f64) -> Accuracy {
        Accuracy::from_figures([("mae", mae), ("mape", mape), ("package_mae", package_mae)])
    }

    #[test]
    fn parses_every_spelling() -> Result<(), String> {
        for (text, want) in [
            ("mae<=10", "mae<=10"),
            ("mae=10", "mae<=10"),
            ("mae:10", "mae<=10"),
            ("mae = 10 ; mape < 20", "mae<=10;mape<20"),
            ("mae=10:mape=20", "mae<=10;mape<=20"),
            (
                "package_mae>1e1, dram_mape==0.5",
                "package_mae>10;dram_mape==0.5",
            ),
            ("", ""),
        ] {
            assert_eq!(Filter::parse(text)?.to_string(), want, "{text}");
        }
        Ok(())
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for bad in [
            "abs_max_corr>0.5",
            "mae",
            "mae<=",
            "mae<=ten",
            "mae<=10x",
            "mae<=inf",
            "_mae<1",
            "mae!=3",
        ] {
            assert!(Filter::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn conditions_compare_the_named_figure() -> Result<(), String> {
        // package_mae 12 is the worst component, so mae is 12 (the overall 8 is ignored).
        let a = accuracy(8.0, 5.0, 12.0);
        assert!(Filter::parse("mae<=12")?.accepts(&a));
        assert!(!Filter::parse("mae<=10")?.accepts(&a));
        assert!(!Filter::parse("mae<12")?.accepts(&a));
        assert!(Filter::parse("mape<=5;package_mae>=12")?.accepts(&a));
        // A figure the model does not have fails the condition.
        assert!(!Filter::parse("dram_mae<=100")?.accepts(&a));
        assert!(Filter::parse("")?.accepts(&Accuracy::default()));
        Ok(())
    }
}
