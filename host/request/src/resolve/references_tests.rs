//! Edits (`i2i`) against an editing model's reference rules: how many pictures, their sizes,
//! the output's default size, and the field each refusal names.

use super::*;

fn png(w: u32, h: u32) -> String {
    use base64::Engine as _;
    let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x % 256) as u8, (y % 256) as u8, 7]));
    let mut bytes = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn editing(rules: ReferenceLimits) -> ModelLimits {
    ModelLimits {
        family: "Edit".into(),
        tasks: vec![TaskType::T2i, TaskType::I2i],
        image_roles: vec![crate::ImageRole::Reference],
        video: None,
        picture: Some(PictureLimits { spatial_multiple: 16, max_side: 2048 }),
        references: Some(rules),
        ..ModelLimits::example()
    }
}

const FLUX: ReferenceLimits = ReferenceLimits {
    max_references: 2,
    min_reference_side: 64,
    max_reference_aspect: 8.0,
    max_reference_area: 1024 * 1024,
    scale_to_area: false,
};

fn edit(pictures: &[(u32, u32)]) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("e", "make it blue");
    r.task = TaskType::I2i;
    for &(w, h) in pictures {
        // A picture sent without a role is a reference in an edit.
        r.inputs.push(InputPart::Image { path: None, b64: Some(png(w, h)), role: crate::ImageRole::FirstFrame });
    }
    r
}

#[test]
fn an_edit_takes_its_pictures_as_references_and_its_size_from_the_last() {
    let r = edit(&[(96, 80), (100, 70)]).resolve(&editing(FLUX), || 0).unwrap();
    assert_eq!(r.images.len(), 2);
    assert!(r.images.iter().all(|i| i.role == crate::ImageRole::Reference));
    // The last picture's size cut to multiples of 16 (it is under the area cap).
    assert_eq!((r.width, r.height, r.num_frames), (96, 64, 1));
    // Scaled to the area whatever the size, sides multiples of 32 first (Qwen-Image-Edit).
    let qwen = ReferenceLimits { scale_to_area: true, min_reference_side: 28, ..FLUX };
    let r = edit(&[(120, 90)]).resolve(&editing(qwen), || 0).unwrap();
    assert_eq!((r.width, r.height), (1184, 896));
    // A size given wins.
    let mut e = edit(&[(120, 90)]);
    (e.diffusion.width, e.diffusion.height) = (Some(48), Some(32));
    assert_eq!(e.resolve(&editing(FLUX), || 0).map(|r| (r.width, r.height)).unwrap(), (48, 32));
}

#[test]
fn edits_refuse_what_the_model_cannot_take_naming_the_field() {
    let e = edit(&[(96, 80), (96, 80), (96, 80)]).resolve(&editing(FLUX), || 0).unwrap_err();
    assert_eq!(e.field, "inputs[3]");
    assert!(e.rule.contains("3 reference pictures; this model takes at most 2"), "{e}");
    let e = edit(&[(96, 40)]).resolve(&editing(FLUX), || 0).unwrap_err();
    assert_eq!(e.field, "inputs[1]");
    assert!(e.rule.contains("too small"), "{e}");
    let e = edit(&[(640, 64)]).resolve(&editing(ReferenceLimits { max_reference_aspect: 4.0, ..FLUX }), || 0);
    assert!(e.unwrap_err().rule.contains("aspect ratio 10.0 is above 4"));
    let e = edit(&[]).resolve(&editing(FLUX), || 0).unwrap_err();
    assert_eq!(e.field, "inputs");
    // A model without references, and a reference outside an edit.
    let text_only = ModelLimits { references: None, ..editing(FLUX) };
    let e = edit(&[(96, 80)]).resolve(&text_only, || 0).unwrap_err();
    assert_eq!(e.field, "task");
    let mut t2i = edit(&[]);
    t2i.task = TaskType::T2i;
    t2i.inputs.push(InputPart::Image { path: None, b64: Some(png(96, 80)), role: crate::ImageRole::Reference });
    let e = t2i.resolve(&editing(FLUX), || 0).unwrap_err();
    assert_eq!(e.field, "inputs[1]");
}
