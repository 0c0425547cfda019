"""The kit's helpers: strategies, layouts, laws, diagnosis, the tiled-path claims, target loading."""
