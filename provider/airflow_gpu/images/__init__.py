"""Container images for accelerators: a catalog of real tags, selection and validation. Pure."""
