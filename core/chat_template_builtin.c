/* chat_template_builtin.c — the built-in chat templates (recur_chat_template_builtin). Each is
 * the Jinja text a model family publishes in its tokenizer_config.json, run through the same
 * interpreter as a model folder's template; docs/API.md "Chat templates" names the sources. */
#include <string.h>

#include "chat_template.h"

typedef struct {
    const char *name, *src, *bos, *eos;
} builtin;

static const builtin builtins[] = {
    /* ChatML as Qwen ships it (Qwen2-Instruct / Qwen1.5-Chat tokenizer_config.json), with its
     * default system prompt when the conversation has none */
    {"chatml",
     "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
     "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
     "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
     "", "<|im_end|>"},
    /* Llama-2-chat (meta-llama/Llama-2-*-chat-hf): [INST] ... [/INST], <<SYS>> folded into the
     * first user turn, roles must alternate user/assistant */
    {"llama2",
     "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
     "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
     "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
     "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
     "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
     "{% if loop.index0 == 0 and system_message != false %}"
     "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
     "{% else %}{% set content = message['content'] %}{% endif %}"
     "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
     "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
     "<s>", "</s>"},
    /* Meta-Llama-3-Instruct */
    {"llama3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}"
     "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
     "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
     "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
     "<|begin_of_text|>", "<|eot_id|>"},
    /* RWKV World (the HF RWKV tokenizer configs' User: / System: / Assistant: form, without
     * their leading <|rwkv_tokenizer_end_of_text|> literal, which recurd's RWKV vocabulary
     * would encode as plain text) */
    {"rwkv",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{'User: ' + message['content'] + '\n\n'}}"
     "{% elif message['role'] == 'system' %}{{'System: ' + message['content'] + '\n\n'}}"
     "{% elif message['role'] == 'assistant' %}{{'Assistant: ' + message['content'] + '\n\n'}}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
     "", ""},
    /* recurd's own, for models without a template (the default byte model): one
     * "role: content" line per message, then "assistant: " (with the space a rendered assistant
     * message has after its colon, so that prompt + reply is a prefix of the next turn's prompt
     * and the prefix cache resumes at the reply's end) */
    {"plain",
     "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}"
     "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}",
     "", ""},
};

int ct_builtin_source(const char *name, const char **src, const char **bos, const char **eos)
{
    for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
        if (!strcmp(builtins[i].name, name)) {
            *src = builtins[i].src;
            *bos = builtins[i].bos;
            *eos = builtins[i].eos;
            return 1;
        }
    return 0;
}
