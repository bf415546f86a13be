"""Text from outside the process, in and out: files another job or a pull request wrote are
read within bounds (`jsonfile`: regular files, size, depth, integer digits; `yamlbounds`:
depth, alias expansion and loops on parse events), and strings that reach GitHub are escaped
(`escape`: Markdown and workflow commands). A leaf: imports only `errors`."""
