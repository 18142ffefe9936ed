//! A node a spec names that its site's cluster does not have ([`UnknownNode`]).

use std::fmt;

use crate::plan::UnknownNode;

impl fmt::Display for UnknownNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} is not a node of site {}'s cluster; known nodes: {}",
            self.node,
            self.site,
            self.known.join(", ")
        )?;
        if let Some(closest) = &self.closest {
            write!(f, " (did you mean {closest}?)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_names_the_members_and_the_node_meant() {
        let typo = UnknownNode {
            node: "pve9".into(),
            site: "lab".into(),
            known: vec!["pve1".into(), "pve2".into()],
            closest: Some("pve1".into()),
        };
        assert_eq!(
            typo.to_string(),
            "node pve9 is not a node of site lab's cluster; known nodes: pve1, pve2 (did you \
             mean pve1?)"
        );
        let far = UnknownNode {
            closest: None,
            ..typo
        };
        assert!(
            far.to_string().ends_with("known nodes: pve1, pve2"),
            "{far}"
        );
    }
}
