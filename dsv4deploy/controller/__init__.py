"""What the collection's action plugins share on the controller."""
