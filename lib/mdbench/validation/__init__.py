"""The validation room: studies of the model itself (pure liquids against experiment), above build, engine
and analysis, whose pipelines they run."""
