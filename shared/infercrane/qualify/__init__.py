"""Qualification: the suite that proves the service's promises locally (`infercrane qualify
--local`) and the gated provider run (`infercrane qualify --providers`). Test-side code: it may
inject faults from outside (killed processes, duplicate messages); production code has none."""
