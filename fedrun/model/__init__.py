"""Models: the zoo, their flat-parameter functional form, and a CNN cohort as one grouped network."""
