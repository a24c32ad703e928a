"""Options from keywords: the C++ options struct, its defaults, and an error for unknown keys."""

_COPY = object()


def option_names(cls):
    return sorted(k for k in dir(cls) if not k.startswith("_"))


def make_options(cls, function, options=None, keywords=None):
    """A copy of `options` (or the defaults of `cls`) with the fields named in `keywords` set.

    An enum field takes its member or the member's name as a string. An unknown keyword is a
    TypeError naming the function and listing the fields, as Python reports an unexpected keyword.
    """
    if options is None:
        result = cls()
    elif isinstance(options, cls):
        result = cls(options)
    else:
        raise TypeError(f"{function}: options must be a normkit {cls.__name__}, got {type(options).__name__}")
    for key, value in (keywords or {}).items():
        if key.startswith("_") or not hasattr(result, key):
            raise TypeError(f"{function}() got an unexpected keyword argument '{key}'; "
                            f"the options ({cls.__name__}) are: {', '.join(option_names(cls))}")
        current = getattr(result, key)
        members = getattr(type(current), "__members__", None)
        if isinstance(value, str) and members is not None:
            if value not in members:
                raise ValueError(f"{function}: {key} must be one of {', '.join(members)}, got '{value}'")
            value = members[value]
        setattr(result, key, value)
    return result


def _repr(self):
    fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in option_names(type(self)))
    return f"{type(self).__name__}({fields})"


def install_repr(module):
    """Gives every options class of a binding module a repr that lists its fields."""
    for name in dir(module):
        cls = getattr(module, name)
        if isinstance(cls, type) and (name.endswith("_options") or name.endswith("_criterion")):
            cls.__repr__ = _repr
