//! {{name}}'s workflows.

pub mod hello;

/// Every workflow this app runs, by name: `dev` and the Lambda functions serve these.
pub fn workflows() -> siesta::Registry {
    let mut workflows = siesta::Registry::new();
    workflows.register("hello", hello::hello);
    workflows
}
