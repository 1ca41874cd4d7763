"""The experiment spec: typed, located, checked before anything is submitted. Owns the pydantic models (`models`,
with the sections each mode owns), reading YAML with locations, `extends` and matrices (`load`), findings in the
user's words at the value that caused them (`findings`, `wording`), the domain rules (`rules`, with each mode's
spec half through `modes`), the switch registry (`switches`), performance tolerances (`tolerance`) and the job
script (`render`). May import: judge, errors, limits, names and the spec halves of capabilities
(modes/*/spec_rules.py, profile/section.py, promote/spec_layer.py for `extends: stable`: pydantic, findings
and files only). Never imports store or scheduler."""
