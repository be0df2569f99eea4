"""Accuracy evaluation of engines and ONNX models: COCO detection metrics, classification top-k, keypoints."""
