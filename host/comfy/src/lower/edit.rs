//! Edits: a prompt conditioned on reference pictures (FLUX.2's `ReferenceLatent` of a
//! VAE-encoded picture, Qwen-Image's `TextEncodeQwenImageEdit(Plus)` with up to three), which
//! become the request's references (task `i2i`). The output takes its size from the references
//! as the model's pipeline does: the latent is then the `VAEEncode` of a reference (fully
//! denoised), or an empty latent sized by `GetImageSize` of one.

use serde_json::Value;

use fastvideo_request::ImageRole;

use super::source::Source;
use super::{text, Lowering, ModelFile};
use crate::media::ImagePlan;
use crate::translate::GraphNode;
use crate::CompileError;

/// The reference placements this runtime's edit models use: FLUX.2's and Qwen-Image's indexed
/// references, and Edit-2511's at time zero (which its folder's `zero_cond_t` says).
const METHODS: [&str; 2] = ["index", "index_timestep_zero"];

impl<'a> Lowering<'a> {
    /// An edit's conditioning node `e`: its text, with the reference pictures on the way
    /// appended to `refs` in the order the model takes them.
    pub(super) fn edit_conditioning(
        &self,
        e: &'a GraphNode,
        files: &mut Vec<ModelFile>,
        refs: &mut Vec<ImagePlan>,
    ) -> Result<Option<String>, CompileError> {
        match e.stage.as_str() {
            "condition.reference" => {
                // Inner references first: each `ReferenceLatent` appends its picture.
                let (text, _) = self.conditioning(e, "conditioning", files, refs)?;
                if let Some((enc, _)) = self.input(e, "latent") {
                    if enc.stage != "encode.vae" {
                        let msg = format!(
                            "`latent` comes from node {} (`{}`); this runtime takes a VAEEncode of a picture",
                            enc.origin, enc.stage
                        );
                        return Err(CompileError::node(&e.origin, msg));
                    }
                    self.vae(enc, "vae", files)?;
                    refs.extend(self.picture(enc, "images", ImageRole::Reference)?);
                }
                Ok(text)
            }
            "condition.reference_method" => {
                let method = text(e, "method")?;
                if !METHODS.contains(&method.as_str()) {
                    let msg = format!(
                        "reference_latents_method `{method}`: this runtime places references by index ({})",
                        METHODS.join(", ")
                    );
                    return Err(CompileError::node(&e.origin, msg));
                }
                Ok(self.conditioning(e, "conditioning", files, refs)?.0)
            }
            _ => {
                self.text_encoder(e, files)?;
                if self.input(e, "vae").is_some() {
                    self.vae(e, "vae", files)?;
                }
                for param in ["image1", "image2", "image3"] {
                    refs.extend(self.picture(e, param, ImageRole::Reference)?);
                }
                Ok(Some(text(e, "text")?))
            }
        }
    }

    /// The latent of an edit with references `refs`: sized by them (see the module), or an
    /// empty latent of a size given as numbers.
    pub(super) fn edit_source(
        &self,
        sampler: &GraphNode,
        latent: &'a GraphNode,
        refs: &[ImagePlan],
        files: &mut Vec<ModelFile>,
    ) -> Result<Source<'a>, CompileError> {
        let err = |m: String| Err(CompileError::node(&sampler.origin, m));
        match latent.stage.as_str() {
            "encode.vae" => {
                self.vae(latent, "vae", files)?;
                let Some(p) = self.picture(latent, "images", ImageRole::Reference)? else {
                    return err(format!("node {}'s `pixels` are not connected", latent.origin));
                };
                if !refs.iter().any(|r| r.node == p.node && r.resize == p.resize) {
                    return err(format!(
                        "its latent encodes node {}'s picture, which is not one of the edit's references: the output \
                         takes its size from the references",
                        p.node
                    ));
                }
                Ok(Source::Edit(latent, p))
            }
            "latent.empty" if ["width", "height"].iter().all(|k| latent.params.get(*k).is_some_and(Value::is_number)) => {
                Ok(Source::Empty(latent))
            }
            "latent.empty" => {
                let mut from: Option<ImagePlan> = None;
                for k in ["width", "height"] {
                    let sized = self.input(latent, k).filter(|(s, _)| s.stage == "image.size");
                    let Some((size, _)) = sized else {
                        return err(format!("node {}'s `{k}` is neither a number nor GetImageSize of a reference", latent.origin));
                    };
                    let p = self.picture(size, "images", ImageRole::Reference)?.expect("required by the stage");
                    if !refs.iter().any(|r| r.node == p.node && r.resize == p.resize) {
                        return err(format!(
                            "node {}'s `{k}` is the size of node {}'s picture, which is not one of the edit's references",
                            latent.origin, p.node
                        ));
                    }
                    if from.as_ref().is_some_and(|s| s.node != p.node || s.resize != p.resize) {
                        return err(format!("node {}'s width and height are sizes of different pictures", latent.origin));
                    }
                    from = Some(p);
                }
                Ok(Source::Edit(latent, from.expect("width and height checked")))
            }
            other => err(format!(
                "an edit's latent comes from node {} (`{other}`); this runtime takes an empty latent or the VAEEncode of \
                 a reference",
                latent.origin
            )),
        }
    }
}

/// Which of `refs` sizes the output of an edit from `source`.
pub(super) fn size_from(source: &Source, refs: &[ImagePlan]) -> Option<usize> {
    let Source::Edit(_, p) = source else { return None };
    refs.iter().position(|r| r.node == p.node && r.resize == p.resize)
}

/// The negative conditions on the positive's pictures or none: the edit models run both
/// branches on the same references.
pub(super) fn same_references(
    n: &GraphNode,
    positive: &[ImagePlan],
    negative: &[ImagePlan],
) -> Result<(), CompileError> {
    let same = |a: &ImagePlan, b: &ImagePlan| a.node == b.node && a.resize == b.resize;
    let agree = negative.len() == positive.len() && negative.iter().zip(positive).all(|(a, b)| same(a, b));
    if negative.is_empty() || agree {
        return Ok(());
    }
    let nodes = |v: &[ImagePlan]| v.iter().map(|p| p.node.clone()).collect::<Vec<_>>().join(", ");
    Err(CompileError::node(
        &n.origin,
        format!(
            "`negative` conditions on pictures of nodes [{}] and `positive` on [{}]: this runtime's edit models run both \
             on the positive's references",
            nodes(negative),
            nodes(positive)
        ),
    ))
}
