_tensormount() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="tensormount"
                ;;
            tensormount,diff)
                cmd="tensormount__subcmd__diff"
                ;;
            tensormount,verify)
                cmd="tensormount__subcmd__verify"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        tensormount)
            opts="-f -n -s -v -N -t -o -h -V --foreground --log-file --list --json --help --version verify diff"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -N)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -W "allow_other allow_root auto_unmount fsname= strict npy dtype=f32 dtype=f64 pickle=on pickle=off gguf=on gguf=off onnx=on onnx=off ollama=on ollama=off dcp=on dcp=off dcp_model=auto dcp_model=all dcp_model=GROUP verify layout=flat layout=tree refresh=auto refresh=inotify refresh=poll refresh=off refresh_interval= settle= source_idle= decode_cache= direct_io kernel_cache noexec rw" -- "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        tensormount__subcmd__diff)
            opts="-h --json --values --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        tensormount__subcmd__verify)
            opts="-h --json --write-manifest --manifest --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --write-manifest)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --manifest)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _tensormount -o nosort -o bashdefault -o default tensormount
else
    complete -F _tensormount -o bashdefault -o default tensormount
fi
