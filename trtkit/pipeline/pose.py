"""``--post pose``: keypoints of heatmap or YOLOv8-pose engines (:mod:`trtkit.detection.pose`) decoded per frame,
mapped back to the frame and drawn with their skeleton."""

from __future__ import annotations

import numpy as np

from trtkit.detection.pose import SKELETONS, decode_poses, draw_poses, load_skeleton
from trtkit.errors import InputError
from trtkit.pipeline.api import Processing
from trtkit.pipeline.device_frames import image_preprocess_meta
from trtkit.pipeline.preprocess import ImagePreprocess


def pose_processing(
    skeleton: str | None = None,
    *,
    min_confidence: float = 0.5,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    resize: str = "letterbox",
    normalize: dict | None = None,
    kpt_shape: tuple[int, int] | None = None,
) -> Processing:
    """pre: the engine's image preprocessing (``resize``: ``letterbox`` or ``stretch``; the letterbox on the GPU
    where it can run); post: the frame's :class:`~trtkit.detection.pose.Poses` in its pixels; draw: boxes,
    keypoints at or above ``min_confidence`` and the skeleton.

    Args:
        skeleton: a built-in name (``coco17``) or a JSON file of ``[a, b]`` keypoint index pairs; ``None``: coco17
            for a model of 17 keypoints, else the keypoints alone.
        conf_threshold, iou_threshold: YOLOv8-pose heads: the lowest person score kept, NMS's IoU threshold.
        normalize: the preprocessing's mean/std (:class:`Processing`'s).
        kpt_shape: YOLOv8-pose heads: keypoints and values each (ultralytics' metadata; see
            :func:`~trtkit.detection.pose.pose_layout`).

    Raises:
        InputError: the skeleton is unknown or unreadable; on the first frame, the output is not a pose output or
            has another keypoint count than the skeleton.
    """
    chosen = None if skeleton is None else load_skeleton(skeleton)
    size: list = []  # the engine input's (height, width), known once the pipeline asks for the preprocessing
    checked: dict = {}

    def pre_for(target):
        size[:] = [(target.height, target.width)]
        return ImagePreprocess(target, resize=resize, **(normalize or {}))

    def post(outputs, meta, image):
        if len(outputs) != 1:
            raise InputError(f"Pose decoding reads one output; the engine has {len(outputs)}: {', '.join(outputs)}.")
        output = np.asarray(next(iter(outputs.values())))[None]
        options = dict(conf_threshold=conf_threshold, iou_threshold=iou_threshold, kpt_shape=kpt_shape)
        poses = decode_poses(output, size[0], **options)[0]
        if "skeleton" not in checked:
            count = poses.points.shape[1]
            checked["skeleton"] = chosen or (SKELETONS["coco17"] if count == 17 else None)
            if checked["skeleton"] is not None:
                checked["skeleton"].check(count)
        return poses.mapped(meta)

    def draw(image, poses):
        from PIL import Image

        picture = Image.fromarray(np.asarray(image))
        return np.asarray(draw_poses(picture, poses, checked.get("skeleton"), min_confidence=min_confidence))

    # the default letterbox's meta, which the GPU letterbox gives as well; a plain resize runs on the CPU
    device_meta = image_preprocess_meta if resize == "letterbox" else None
    return Processing(post=post, draw=draw, pre_for=pre_for, device_meta=device_meta, normalize=normalize)
