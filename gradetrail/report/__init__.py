"""The lines a run and a gate print, shared by the CLI, the viewer and CI."""
